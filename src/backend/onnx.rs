//! The ONNX Runtime backend (`backend: "onnxruntime"`), with the library loaded at run time.
//!
//! `libonnxruntime.so` is found through `--backend-config=onnxruntime,library=<path>`, `ORT_DYLIB_PATH`,
//! the usual library folders, the `onnxruntime` package of `python3` or the checkout's `.ort/` (see
//! [`library`]). When none works, ONNX models fail to load with a reason that says where the server
//! looked and what to install; the server itself keeps running.
#![allow(unsafe_code)]

mod accelerators;
pub mod library;
mod options;

use crate::backend::{libsearch, overlaps};
use crate::error::{Error, Result};
use crate::model_api::types::{DataType, Tensor};
use crate::model_api::{
    Backend, BackendConfig, ExecRequest, ExecResult, ExecTimings, InstanceKind, InstanceSpec, ModelContext,
    ModelInstance,
};
use bytes::Bytes;
use ort::environment::Environment;
use ort::memory::{AllocationDevice, Allocator, AllocatorType, MemoryInfo, MemoryType};
use ort::session::{Session, SessionInputValue, SharedSessionInner};
use ort::value::{DynTensor, DynValue, PrimitiveTensorElementType, Shape, TensorElementType, TensorRefMut, ValueType};
use ort::AsPointer;
use std::borrow::Cow;
use std::marker::PhantomData;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

pub struct OnnxBackend {
    /// `--backend-config=onnxruntime,library=...`, and whether the configuration file gave it.
    explicit_library: Option<(PathBuf, bool)>,
    /// `--backend-config=onnxruntime,allow_spinning=true`: ONNX Runtime's thread pools spin after each
    /// run by default, which on a device with 2 to 6 cores takes the CPU from the threads receiving
    /// the next request. Off unless asked for (measured in benches/large_tensor.py).
    allow_spinning: bool,
    /// `--backend-config=onnxruntime,enable-global-threadpool=1` with its `intra_op_thread_count` and
    /// `inter_op_thread_count`, as Triton's backend reads them; an `Err` says which setting is bad.
    global_pool: std::result::Result<Option<GlobalPool>, String>,
    /// The process-wide ORT environment, created on first use; an `Err` records why loading failed.
    env: OnceLock<std::result::Result<Environment, String>>,
}

/// One pair of thread pools that every session shares (ONNX Runtime's global thread pools).
#[derive(Debug, Clone, Copy, PartialEq)]
struct GlobalPool {
    /// Threads within an operator; 0 lets ONNX Runtime choose (the core count).
    intra: usize,
    /// Threads across operators (parallel execution mode); 0 lets ONNX Runtime choose.
    inter: usize,
}

/// Reads the global thread pool settings of `--backend-config=onnxruntime,...`.
fn global_pool(config: &BackendConfig) -> std::result::Result<Option<GlobalPool>, String> {
    let get = |k: &str| config.get("onnxruntime", k);
    let on = match get("enable-global-threadpool") {
        None => false,
        Some(v) => options::parse_bool(v).ok_or_else(|| {
            format!("--backend-config=onnxruntime,enable-global-threadpool={v} is not 1 or 0 (true or false)")
        })?,
    };
    let count = |k: &str| -> std::result::Result<usize, String> {
        let Some(v) = get(k) else { return Ok(0) };
        v.trim().parse::<usize>().ok().filter(|&n| n <= options::MAX_ORT_THREADS).ok_or_else(|| {
            format!("--backend-config=onnxruntime,{k}={v} is not a thread count from 0 to {}", options::MAX_ORT_THREADS)
        })
    };
    let pool = GlobalPool { intra: count("intra_op_thread_count")?, inter: count("inter_op_thread_count")? };
    Ok(on.then_some(pool))
}

impl OnnxBackend {
    pub fn new(config: &BackendConfig) -> Self {
        let allow_spinning = match config.get("onnxruntime", "allow_spinning") {
            None | Some("false" | "0") => false,
            Some("true" | "1") => true,
            Some(other) => {
                tracing::warn!(
                    "--backend-config=onnxruntime,allow_spinning={other} is not true or false; spinning stays off."
                );
                false
            }
        };
        OnnxBackend {
            explicit_library: config
                .get("onnxruntime", "library")
                .filter(|p| !p.trim().is_empty())
                .map(|p| (PathBuf::from(p.trim()), config.from_config_file)),
            allow_spinning,
            global_pool: global_pool(config),
            env: OnceLock::new(),
        }
    }

    fn environment(&self) -> Result<&Environment> {
        let pool = self.global_pool.as_ref().map_err(|e| Error::invalid(e.clone()))?;
        self.env
            .get_or_init(|| init_runtime(self.explicit_library.clone(), *pool, self.allow_spinning))
            .as_ref()
            .map_err(|e| Error::unavailable(e.clone()))
    }
}

/// ONNX Runtime's log messages, into the server's log: warnings and errors as such, its info and
/// verbose messages (which a session only sends when the server logs verbosely, see
/// `session_options`) as verbose ones.
fn forward_ort_log(level: ort::logging::LogLevel, _category: &str, _id: &str, location: &str, message: &str) {
    use ort::logging::LogLevel;
    match level {
        LogLevel::Verbose | LogLevel::Info => tracing::debug!("ONNX Runtime ({location}): {message}"),
        LogLevel::Warning => tracing::warn!("ONNX Runtime ({location}): {message}"),
        LogLevel::Error | LogLevel::Fatal => tracing::error!("ONNX Runtime ({location}): {message}"),
    }
}

/// ONNX Runtime's options for the global thread pools (ORT loaded).
fn global_pool_options(
    pool: GlobalPool,
    allow_spinning: bool,
) -> std::result::Result<ort::environment::GlobalThreadPoolOptions, ort::Error> {
    ort::environment::GlobalThreadPoolOptions::default()
        .with_intra_threads(pool.intra)?
        .with_inter_threads(pool.inter)?
        .with_spin_control(allow_spinning)
}

/// Why the dynamic loader refuses `path` (dlerror's text: wrong architecture, missing dependency, not
/// an ELF file...), when it does; ort only says that dlopen failed.
fn dlopen_error(path: &Path) -> Option<String> {
    // SAFETY: dlopen runs the library's initializers. This is the file the server was pointed at (or
    // found) as ONNX Runtime, which ort has just tried to load in the same way; the handle is closed
    // again at once and nothing from it is called.
    let opened = unsafe { libloading::Library::new(path) };
    opened.err().map(|e| match std::error::Error::source(&e) {
        // libloading keeps dlerror's text in the source: "dlopen failed: <path>: invalid ELF header".
        Some(why) => format!("{e}: {why}"),
        None => e.to_string(),
    })
}

fn init_runtime(
    setting: Option<(PathBuf, bool)>,
    pool: Option<GlobalPool>,
    allow_spinning: bool,
) -> std::result::Result<Environment, String> {
    let inputs = library::Inputs::of_this_process(setting);
    let named = library::named(&inputs).map(|(_, by)| by);
    let load = |path: &Path| ort::init_from(path).map_err(|e| dlopen_error(path).unwrap_or_else(|| e.to_string()));
    let found = match libsearch::first_loadable(library::stages(inputs), load) {
        Ok(found) => found,
        Err(tried) => {
            // Said once here with every path tried; each model that needs the library gets the short form.
            tracing::error!(
                "The ONNX Runtime library (libonnxruntime.so) could not be loaded, so ONNX models cannot be \
                 served. Tried: {}",
                tried.join("; ")
            );
            return Err(library::reason(named, &tried));
        }
    };
    let path = found.path.display().to_string();
    tracing::info!("ONNX Runtime is loaded from '{path}' ({}).", found.origin);
    let mut builder = found.value;
    if let Some(pool) = pool {
        builder = builder.with_global_thread_pool(
            global_pool_options(pool, allow_spinning)
                .map_err(|e| format!("cannot set up ONNX Runtime's global thread pool: {e}"))?,
        );
    }
    builder
        .with_name("tritonrs")
        .with_logger(Arc::new(forward_ort_log))
        .build()
        .inspect(|env| env.set_log_level(ort::logging::LogLevel::Warning))
        .map_err(|e| format!("ONNX Runtime at '{path}' failed to initialize: {e}"))
}

/// The model file, which must exist.
fn model_path(ctx: &ModelContext) -> Result<std::path::PathBuf> {
    let file = crate::model_config::model_file(&ctx.version_dir, &ctx.config)?;
    if !file.is_file() {
        return Err(Error::invalid(format!("model file '{}' not found", file.display())));
    }
    Ok(file)
}

/// Where the model version's TensorRT engines are cached.
fn cache_dir(ctx: &ModelContext) -> std::path::PathBuf {
    accelerators::default_cache_dir().join("onnxruntime").join(&ctx.name).join(ctx.version.to_string())
}

impl Backend for OnnxBackend {
    fn name(&self) -> &'static str {
        "onnxruntime"
    }

    fn check_instance(&self, ctx: &ModelContext, _spec: &InstanceSpec) -> Result<()> {
        self.environment()?;
        model_path(ctx)?;
        options::read(&ctx.config)?;
        // A model's accelerator settings are checked before any hardware, so a typo is reported as such.
        accelerators::plan(&ctx.config, &cache_dir(ctx)).map(drop)
    }

    fn create_instance(&self, ctx: &ModelContext, spec: &InstanceSpec) -> Result<Box<dyn ModelInstance>> {
        let env = self.environment()?;
        let file = model_path(ctx)?;
        let settings = options::read(&ctx.config)?;
        if !settings.unknown.is_empty() {
            tracing::warn!(
                "Model '{}' has parameters that the ONNX Runtime backend does not know, which are ignored (as \
                 tritonserver ignores them): {}.",
                ctx.name,
                settings.unknown.join(", ")
            );
        }
        let mut builder =
            Session::builder(env).map_err(|e| ort_err(ctx, "cannot create an ONNX Runtime session", e))?;
        for lib in ctx.config.model_operations.iter().flat_map(|o| &o.op_library_filename) {
            builder = register_op_library(builder, ctx, lib)?;
        }
        builder = self.thread_options(ctx, &settings, builder)?;
        builder = session_options(ctx, &settings, builder)?;
        let plan = accelerators::plan(&ctx.config, &cache_dir(ctx))?;
        let providers = match spec.kind {
            InstanceKind::Gpu { device_id } => gpu_providers(spec, &plan, &settings.cuda, device_id)?,
            InstanceKind::Cpu => {
                if !settings.cuda.is_empty() {
                    let names: Vec<&str> = settings.cuda.iter().map(|(k, _)| k.as_str()).collect();
                    tracing::info!(
                        "Model '{}': the CUDA settings {} configure the CUDA execution provider of KIND_GPU \
                         instances; instance '{}' is KIND_CPU and does not use them.",
                        ctx.name,
                        names.join(", "),
                        spec.name
                    );
                }
                cpu_providers(spec, &plan)?
            }
            // As Triton's onnxruntime backend, only KIND_GPU enables CUDA: a KIND_MODEL instance is
            // placed by the CPU execution providers the configuration names (said in the log).
            InstanceKind::Model => {
                tracing::info!(
                    "Instance '{}' is KIND_MODEL: ONNX Runtime places it with the CPU execution providers.",
                    spec.name
                );
                cpu_providers(spec, &plan)?
            }
        };
        if !providers.is_empty() {
            // `error_on_failure`: a provider that cannot start fails the load; never a silent CPU fallback.
            builder = builder.with_execution_providers(providers).map_err(|e| {
                Error::unavailable(format!("cannot enable the execution providers of '{}': {e}", spec.name))
            })?;
        }
        let session = builder
            .commit_from_file(&file)
            .map_err(|e| Error::invalid(format!("cannot load '{}': {e}", file.display())))?;
        check_io(ctx, &session)?;
        let run_options = run_options(ctx, &settings)?;
        Ok(Box::new(OnnxInstance { session, run_options, staging: Vec::new() }))
    }
}

type Builder = ort::session::builder::SessionBuilder;

impl OnnxBackend {
    /// The session's thread pools: spinning off unless allowed, and the model's thread counts.
    fn thread_options(
        &self,
        ctx: &ModelContext,
        settings: &options::Settings,
        mut builder: Builder,
    ) -> Result<Builder> {
        if matches!(self.global_pool, Ok(Some(_))) {
            // Triton's backend: with the global pools, a model's own thread counts are not used.
            if settings.intra_op_threads.is_some() || settings.inter_op_threads.is_some() {
                tracing::info!(
                    "Model '{}': intra_op_thread_count and inter_op_thread_count are not used because \
                     --backend-config=onnxruntime,enable-global-threadpool is on; the global pools' sizes apply.",
                    ctx.name
                );
            }
            return Ok(builder);
        }
        if !self.allow_spinning {
            builder = builder
                .with_intra_op_spinning(false)
                .map_err(|e| ort_err(ctx, "cannot turn off intra-op thread-pool spinning", e.into()))?;
            builder = builder
                .with_inter_op_spinning(false)
                .map_err(|e| ort_err(ctx, "cannot turn off inter-op thread-pool spinning", e.into()))?;
        }
        if let Some(n) = settings.intra_op_threads.filter(|&n| n > 0) {
            builder = builder
                .with_intra_threads(n)
                .map_err(|e| ort_err(ctx, "cannot set intra_op_thread_count", e.into()))?;
        }
        if let Some(n) = settings.inter_op_threads.filter(|&n| n > 0) {
            builder = builder
                .with_inter_threads(n)
                .map_err(|e| ort_err(ctx, "cannot set inter_op_thread_count", e.into()))?;
        }
        Ok(builder)
    }
}

/// The model's session options: execution mode, graph optimization level, memory arena and pattern,
/// `session.*` config entries; and ONNX Runtime's own log of them (its "Session Options" line, at
/// info level) when the server logs verbosely.
fn session_options(ctx: &ModelContext, s: &options::Settings, mut builder: Builder) -> Result<Builder> {
    use ort::session::builder::GraphOptimizationLevel as L;
    let level = if tracing::enabled!(tracing::Level::DEBUG) {
        ort::logging::LogLevel::Info
    } else {
        ort::logging::LogLevel::Warning
    };
    builder = builder.with_log_level(level).map_err(|e| ort_err(ctx, "cannot set the log level", e.into()))?;
    if let Some(parallel) = s.parallel {
        builder = builder
            .with_parallel_execution(parallel)
            .map_err(|e| ort_err(ctx, "cannot set execution_mode", e.into()))?;
    }
    let level = match s.graph_level {
        options::GraphLevel::All => L::All,
        options::GraphLevel::Basic => L::Level1,
        options::GraphLevel::Extended => L::Level2,
        options::GraphLevel::Disabled => L::Disable,
    };
    builder = builder
        .with_optimization_level(level)
        .map_err(|e| ort_err(ctx, "cannot set optimization.graph.level", e.into()))?;
    if let Some(on) = s.mem_pattern {
        builder =
            builder.with_memory_pattern(on).map_err(|e| ort_err(ctx, "cannot set enable_mem_pattern", e.into()))?;
    }
    if let Some(on) = s.mem_arena {
        builder = set_cpu_arena(ctx, builder, on)?;
    }
    for (k, v) in &s.session_entries {
        builder = builder.with_config_entry(k, v).map_err(|e| ort_err(ctx, &format!("cannot set {k}"), e.into()))?;
    }
    Ok(builder)
}

/// `enable_mem_arena`: ONNX Runtime's `EnableCpuMemArena` / `DisableCpuMemArena` on the session options.
fn set_cpu_arena(ctx: &ModelContext, mut builder: Builder, on: bool) -> Result<Builder> {
    let api = ort::api();
    // SAFETY: `builder` owns live session options (ort created them and keeps them until the session
    // is committed); both calls only flip a flag in them and return a status that `ort_status` releases.
    let status = unsafe {
        if on {
            (api.EnableCpuMemArena)(builder.ptr_mut())
        } else {
            (api.DisableCpuMemArena)(builder.ptr_mut())
        }
    };
    ort_status(status, &format!("cannot set enable_mem_arena for model '{}'", ctx.name))?;
    Ok(builder)
}

/// The run options every run of the instance gets (`memory.enable_memory_arena_shrinkage`), if any.
fn run_options(ctx: &ModelContext, s: &options::Settings) -> Result<Option<ort::session::RunOptions>> {
    if s.run_entries.is_empty() {
        return Ok(None);
    }
    let mut run = ort::session::RunOptions::new().map_err(|e| ort_err(ctx, "cannot create run options", e))?;
    for (k, v) in &s.run_entries {
        run.set(k, v).map_err(|e| ort_err(ctx, &format!("cannot set {k}"), e))?;
    }
    Ok(Some(run))
}

/// An ONNX Runtime failure while building a model's session, as an internal error naming the model.
fn ort_err(ctx: &ModelContext, what: &str, e: ort::Error) -> Error {
    Error::internal(format!("{what} for model '{}': {e}", ctx.name))
}

/// The execution providers of a KIND_GPU instance: the model's TensorRT accelerators, then CUDA with
/// the options of the model's `cuda` accelerator and its CUDA `parameters`.
fn gpu_providers(
    spec: &InstanceSpec,
    plan: &accelerators::Plan,
    cuda_params: &[(String, String)],
    device_id: i32,
) -> Result<Vec<ort::ep::ExecutionProviderDispatch>> {
    let mut providers = Vec::new();
    use ort::ep::ArbitrarilyConfigurableExecutionProvider as _;
    use ort::ep::ExecutionProvider as _;
    if !ort::ep::CUDA::is_available().unwrap_or(false) {
        return Err(Error::unavailable(format!(
            "instance '{}' is KIND_GPU but the loaded ONNX Runtime library has no CUDA execution provider \
             (use a GPU build of libonnxruntime, or KIND_CPU)",
            spec.name
        )));
    }
    for accel in &plan.gpu {
        let accelerators::Accel::TensorRt(opts) = accel else { continue };
        if !ort::ep::TensorRT::is_available().unwrap_or(false) {
            return Err(no_provider(spec, accel));
        }
        if let Some((_, dir)) = opts.iter().find(|(k, _)| k == "trt_engine_cache_path") {
            // A cache folder that cannot be made is the model's problem, not a crash later.
            std::fs::create_dir_all(dir)
                .map_err(|e| Error::unavailable(format!("cannot create the TensorRT engine cache '{dir}': {e}")))?;
        }
        let mut trt = ort::ep::TensorRT::default().with_device_id(device_id);
        for (k, v) in opts {
            trt = trt.with_arbitrary_config(k, v);
        }
        providers.push(trt.build().error_on_failure());
    }
    let mut cuda = ort::ep::CUDA::default().with_device_id(device_id);
    for (k, v) in accelerators::cuda_options(plan, cuda_params) {
        cuda = cuda.with_arbitrary_config(k, v);
    }
    providers.push(cuda.build().error_on_failure());
    Ok(providers)
}

/// The execution providers of a KIND_CPU instance: the model's OpenVINO accelerators.
fn cpu_providers(spec: &InstanceSpec, plan: &accelerators::Plan) -> Result<Vec<ort::ep::ExecutionProviderDispatch>> {
    let mut providers = Vec::new();
    use ort::ep::ExecutionProvider as _;
    for accel in &plan.cpu {
        let accelerators::Accel::OpenVino(opts) = accel else { continue };
        if !ort::ep::OpenVINO::is_available().unwrap_or(false) {
            return Err(no_provider(spec, accel));
        }
        let mut ov = ort::ep::OpenVINO::default();
        for (k, v) in opts {
            use ort::ep::ArbitrarilyConfigurableExecutionProvider as _;
            ov = ov.with_arbitrary_config(k, v);
        }
        providers.push(ov.build().error_on_failure());
    }
    Ok(providers)
}

/// A model asks for an execution provider the loaded ONNX Runtime library was built without.
fn no_provider(spec: &InstanceSpec, accel: &accelerators::Accel) -> Error {
    Error::unavailable(format!(
        "instance '{}' asks for the {p} execution accelerator, but the loaded ONNX Runtime library has no {p} \
         execution provider (use an onnxruntime build with {p}, or remove the accelerator)",
        spec.name,
        p = accel.provider()
    ))
}

/// Every configured tensor must exist in the model with the same datatype and a compatible shape, and
/// every model input must be configured: mismatches fail the load rather than every request.
fn check_io(ctx: &ModelContext, session: &Session) -> Result<()> {
    use crate::model_config::autocomplete::{check_io, IoInfo, ModelIoInfo};
    let describe = |outlets: &[ort::value::Outlet]| -> Vec<IoInfo> {
        outlets
            .iter()
            .map(|o| {
                let (data_type, dims) = match o.dtype() {
                    ValueType::Tensor { ty, shape, .. } => {
                        (from_element_type(*ty).map_or(0, DataType::to_config), shape.to_vec())
                    }
                    _ => (0, Vec::new()),
                };
                IoInfo { name: o.name().to_string(), data_type, dims }
            })
            .collect()
    };
    let io = ModelIoInfo { inputs: describe(session.inputs()), outputs: describe(session.outputs()) };
    check_io(&ctx.config, &io, "ONNX model")
}

fn to_element_type(dt: DataType) -> Option<TensorElementType> {
    Some(match dt {
        DataType::Bool => TensorElementType::Bool,
        DataType::Uint8 => TensorElementType::Uint8,
        DataType::Uint16 => TensorElementType::Uint16,
        DataType::Uint32 => TensorElementType::Uint32,
        DataType::Uint64 => TensorElementType::Uint64,
        DataType::Int8 => TensorElementType::Int8,
        DataType::Int16 => TensorElementType::Int16,
        DataType::Int32 => TensorElementType::Int32,
        DataType::Int64 => TensorElementType::Int64,
        DataType::Fp16 => TensorElementType::Float16,
        DataType::Bf16 => TensorElementType::Bfloat16,
        DataType::Fp32 => TensorElementType::Float32,
        DataType::Fp64 => TensorElementType::Float64,
        DataType::Bytes => TensorElementType::String,
    })
}

/// Registers a custom-operation library (`model_operations { op_library_filename }`) on a session, as
/// Triton's ONNX Runtime backend does: ONNX Runtime loads it and calls its `RegisterCustomOps`. A
/// relative name is inside the model's folder (the repository checked it); a missing library, one that
/// cannot be loaded and one whose registration fails each fail the model, naming the path and ONNX
/// Runtime's message.
fn register_op_library(
    builder: ort::session::builder::SessionBuilder,
    ctx: &ModelContext,
    lib: &str,
) -> Result<ort::session::builder::SessionBuilder> {
    let path = if Path::new(lib).is_absolute() {
        PathBuf::from(lib)
    } else {
        crate::model_config::paths::confined(&ctx.model_dir, lib, "model_operations.op_library_filename")?
    };
    if !path.is_file() {
        return Err(Error::invalid(format!(
            "model '{}': custom operation library '{}' not found",
            ctx.name,
            path.display()
        )));
    }
    builder.with_operator_library(&path).map_err(|e| {
        Error::invalid(format!(
            "model '{}': cannot register the custom operations of '{}': {e}",
            ctx.name,
            path.display()
        ))
    })
}

fn from_element_type(t: TensorElementType) -> Option<DataType> {
    DataType::ALL.into_iter().find(|&d| to_element_type(d) == Some(t))
}

struct OnnxInstance {
    session: Session,
    /// Run options of every run (`memory.enable_memory_arena_shrinkage`); `None` runs with ORT's defaults.
    run_options: Option<ort::session::RunOptions>,
    /// One aligned buffer per input position, reused from request to request for inputs whose bytes
    /// are not aligned for their element type (gRPC's `raw_input_contents` and HTTP's binary data sit
    /// at whatever offset the message put them). Reusing it spares each such request an allocation
    /// that the kernel must fault in and ort zero-fills before the copy (measured with
    /// benches/large_tensor.py: a 588 KiB input cost an allocation, a memset and a memcpy per request).
    staging: Vec<Staging>,
}

/// Staging buffers larger than this are given back after the request instead of being kept.
const STAGING_KEEP_BYTES: usize = 16 << 20;

/// 64 bytes aligned to 64: the unit of a staging buffer, aligned for every element type and for
/// ONNX Runtime's vector loads.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; 64]);

/// A growable buffer of [`Line`]s.
#[derive(Default)]
struct Staging(Vec<Line>);

impl Staging {
    /// `bytes` copied into the buffer (grown when too small; never zero-filled again once grown).
    fn fill(&mut self, bytes: &[u8]) -> &mut [u8] {
        let lines = bytes.len().div_ceil(64);
        if self.0.len() < lines {
            self.0.resize(lines, Line([0; 64]));
        }
        let all: &mut [u8] = bytemuck::cast_slice_mut(&mut self.0[..lines]);
        let dst = &mut all[..bytes.len()];
        dst.copy_from_slice(bytes);
        dst
    }

    /// Drops a buffer that a rare huge request grew past what is worth keeping.
    fn trim(&mut self) {
        if self.0.len() * 64 > STAGING_KEEP_BYTES {
            self.0 = Vec::new();
        }
    }
}

// SAFETY: `Line` is `repr(C)` over a byte array, so it has no padding and every bit pattern (zero
// included) is a valid value, which is what bytemuck's traits require.
unsafe impl bytemuck::Zeroable for Line {}
// SAFETY: as above; it is also `Copy` and `'static`.
unsafe impl bytemuck::Pod for Line {}

impl ModelInstance for OnnxInstance {
    fn execute(&mut self, req: &ExecRequest) -> Result<ExecResult> {
        let t0 = Instant::now();
        if self.staging.len() < req.inputs.len() {
            self.staging.resize_with(req.inputs.len(), Staging::default);
        }
        let mut inputs: Vec<(Cow<'_, str>, SessionInputValue<'_>)> = Vec::with_capacity(req.inputs.len());
        for (t, staging) in req.inputs.iter().zip(self.staging.iter_mut()) {
            inputs.push((Cow::Borrowed(t.name.as_str()), input_value(t, staging)?));
        }
        // Held by the outputs that stay in ONNX Runtime's memory (see OrtOutput).
        let session = self.session.inner();
        let t1 = Instant::now();
        let run = match &self.run_options {
            Some(options) => self.session.run_with_options(inputs, options),
            None => self.session.run(inputs),
        };
        let mut outputs = run.map_err(|e| Error::internal(format!("ONNX Runtime run failed: {e}")))?;
        let t2 = Instant::now();
        // The memory the run's inputs were read from: an output over it is copied out (below).
        let input_memory: Vec<&[u8]> = req
            .inputs
            .iter()
            .filter_map(|t| t.data.as_host().map(|b| &b[..]))
            .chain(self.staging.iter().map(|s| bytemuck::cast_slice::<Line, u8>(&s.0)))
            .collect();
        let mut result: Vec<Tensor> = Vec::with_capacity(req.outputs.len());
        for name in &req.outputs {
            if let Some(same) = result.iter().find(|t| t.name == *name) {
                result.push(same.clone());
                continue;
            }
            let value = outputs
                .remove(name.as_str())
                .ok_or_else(|| Error::internal(format!("the ONNX model produced no output '{name}'")))?;
            result.push(output_tensor(name, value, &session, &input_memory)?);
        }
        drop(input_memory);
        drop(outputs);
        self.staging.iter_mut().for_each(Staging::trim);
        let t3 = Instant::now();
        Ok(ExecResult {
            outputs: result,
            timings: ExecTimings::between(t0, t1, t2, t3),
            parameters: Default::default(),
        })
    }
}

fn ort_value_err(e: ort::Error) -> Error {
    Error::internal(format!("cannot create an ONNX Runtime tensor: {e}"))
}

/// Wraps a request tensor for ORT without copying when its bytes are aligned for the element type;
/// otherwise they are copied once into the instance's reusable `staging` buffer and wrapped there.
fn input_value<'a>(t: &'a Tensor, staging: &'a mut Staging) -> Result<SessionInputValue<'a>> {
    let bytes = t.data.as_host().ok_or_else(|| {
        Error::unsupported(format!("input '{}' is in device memory, which this backend cannot read yet", t.name))
    })?;
    let shape = Shape::new(t.shape.iter().copied());
    if t.datatype == DataType::Bytes {
        return Ok(string_tensor(&t.name, shape, bytes)?.into());
    }
    let Some(elem) = to_element_type(t.datatype) else {
        return Err(Error::invalid(format!("input '{}': unsupported datatype {}", t.name, t.datatype)));
    };
    if bytes.is_empty() {
        // ORT wants a non-null pointer even for zero elements; its own allocation gives one.
        return Ok(DynTensor::new(&Allocator::default(), elem, shape).map_err(ort_value_err)?.into());
    }
    let size = t.datatype.byte_size().unwrap_or(1);
    // ORT's C API takes inputs as mutable pointers although it only reads them.
    let ptr = if (bytes.as_ptr() as usize).is_multiple_of(size) {
        bytes.as_ptr() as *mut std::ffi::c_void
    } else {
        staging.fill(bytes).as_mut_ptr() as *mut std::ffi::c_void
    };
    let info =
        MemoryInfo::new(AllocationDevice::CPU, 0, AllocatorType::Device, MemoryType::Default).map_err(ort_value_err)?;
    macro_rules! borrowed {
        ($ty:ty) => {{
            // SAFETY: `ptr` points at either the request's host bytes, which live in the request
            // for longer than this run, or the instance's staging buffer, which is not touched again
            // until the run's outputs are dropped. It is aligned for the element type (checked above, and
            // staging lines are 64-byte aligned), and its length equals the shape's element count times
            // the element size (validated by the core before scheduling). ONNX Runtime only reads input
            // tensors, so the request's shared bytes are never written through this view.
            let v = unsafe { TensorRefMut::<'_, $ty>::from_raw(info, ptr, shape) };
            let v: TensorRefMut<'_, $ty> = v.map_err(ort_value_err)?;
            Ok(v.into_dyn().into())
        }};
    }
    match t.datatype {
        DataType::Bool => borrowed!(bool),
        DataType::Uint8 => borrowed!(u8),
        DataType::Uint16 => borrowed!(u16),
        DataType::Uint32 => borrowed!(u32),
        DataType::Uint64 => borrowed!(u64),
        DataType::Int8 => borrowed!(i8),
        DataType::Int16 => borrowed!(i16),
        DataType::Int32 => borrowed!(i32),
        DataType::Int64 => borrowed!(i64),
        DataType::Fp16 => borrowed!(half::f16),
        DataType::Bf16 => borrowed!(half::bf16),
        DataType::Fp32 => borrowed!(f32),
        DataType::Fp64 => borrowed!(f64),
        DataType::Bytes => unreachable!("BYTES handled above"),
    }
}

/// An output's bytes left where ONNX Runtime wrote them, so the response takes them without a copy.
/// It holds the value, and the session too: an output may live in memory the session owns (its
/// allocator's arena, or an initializer returned as an output).
struct OrtOutput<T> {
    value: DynValue,
    _session: Arc<SharedSessionInner>,
    _element: PhantomData<fn() -> T>,
}

impl<T: PrimitiveTensorElementType + bytemuck::Pod> AsRef<[u8]> for OrtOutput<T> {
    fn as_ref(&self) -> &[u8] {
        // `output_tensor` extracted the value as `T` before wrapping it, so this does not fail.
        self.value.try_extract_tensor::<T>().map_or(&[], |(_, v)| bytemuck::cast_slice(v))
    }
}

/// Turns an ORT output into a response tensor. Numbers stay in ONNX Runtime's memory (the tensor
/// holds the value), unless they lie in `input_memory`: ONNX Runtime may hand a graph input back as
/// an output, and the request's bytes and the staging buffers are not the response's to keep.
fn output_tensor(
    name: &str,
    value: DynValue,
    session: &Arc<SharedSessionInner>,
    input_memory: &[&[u8]],
) -> Result<Tensor> {
    let ValueType::Tensor { ty, shape, .. } = value.dtype() else {
        return Err(Error::internal(format!("output '{name}' is not a tensor")));
    };
    let dt = from_element_type(*ty).ok_or_else(|| {
        Error::internal(format!("output '{name}' has element type {ty:?}, which Triton cannot represent"))
    })?;
    let dims: Vec<i64> = shape.iter().copied().collect();
    let extract_err = |e: ort::Error| Error::internal(format!("cannot read output '{name}': {e}"));
    let data: Bytes = match dt {
        DataType::Bytes => string_elements(name, &value)?.into(),
        DataType::Bool => {
            let (_, v) = value.try_extract_tensor::<bool>().map_err(extract_err)?;
            v.iter().map(|&b| b as u8).collect::<Vec<u8>>().into()
        }
        _ => {
            macro_rules! pod {
                ($ty:ty) => {{
                    let (_, v) = value.try_extract_tensor::<$ty>().map_err(extract_err)?;
                    let bytes: &[u8] = bytemuck::cast_slice(v);
                    if overlaps(bytes, input_memory) {
                        Bytes::copy_from_slice(bytes)
                    } else {
                        let output = OrtOutput::<$ty> { value, _session: session.clone(), _element: PhantomData };
                        Bytes::from_owner(output)
                    }
                }};
            }
            match dt {
                DataType::Uint8 => pod!(u8),
                DataType::Uint16 => pod!(u16),
                DataType::Uint32 => pod!(u32),
                DataType::Uint64 => pod!(u64),
                DataType::Int8 => pod!(i8),
                DataType::Int16 => pod!(i16),
                DataType::Int32 => pod!(i32),
                DataType::Int64 => pod!(i64),
                DataType::Fp16 => pod!(half::f16),
                DataType::Bf16 => pod!(half::bf16),
                DataType::Fp32 => pod!(f32),
                DataType::Fp64 => pod!(f64),
                DataType::Bool | DataType::Bytes => unreachable!("handled above"),
            }
        }
    };
    Ok(Tensor::new(name, dt, dims, data))
}

/// Turns an ONNX Runtime status into a result; a failure carries ORT's message.
fn ort_status(status: ort::sys::OrtStatusPtr, what: &str) -> Result<()> {
    if status.0.is_null() {
        return Ok(());
    }
    let api = ort::api();
    // SAFETY: `status` is a non-null status ORT just returned; its message is a NUL-terminated string
    // owned by the status, copied out before the status is released (once, here).
    let message = unsafe {
        let m = std::ffi::CStr::from_ptr((api.GetErrorMessage)(status.0)).to_string_lossy().into_owned();
        (api.ReleaseStatus)(status.0);
        m
    };
    Err(Error::internal(format!("{what}: {message}")))
}

/// A string tensor holding BYTES elements exactly: each element is stored with its length through
/// ORT's `GetResizedStringTensorElementBuffer` (ORT >= 1.15), so NUL bytes and non-UTF-8 bytes pass
/// through (ort's own constructor goes through C strings).
fn string_tensor(name: &str, shape: Shape, bytes: &[u8]) -> Result<DynValue> {
    let elems = crate::model_api::types::bytes_elements(bytes)?;
    let empty: Vec<&str> = vec![""; elems.len()];
    let mut v = ort::value::Tensor::from_string_array((shape, empty.as_slice())).map_err(ort_value_err)?.into_dyn();
    let api = ort::api();
    for (i, e) in elems.iter().enumerate() {
        let mut buf: *mut std::ffi::c_char = std::ptr::null_mut();
        // SAFETY: `v` is a string tensor ORT just created with `elems.len()` elements, so index `i` is in
        // range; ORT resizes that element to `e.len()` bytes and returns a buffer of exactly that size,
        // owned by the tensor, which lives (and is not otherwise touched) while we fill it.
        let status = unsafe { (api.GetResizedStringTensorElementBuffer)(v.ptr_mut(), i, e.len(), &mut buf) };
        ort_status(status, &format!("cannot build string input '{name}'"))?;
        if !e.is_empty() {
            if buf.is_null() {
                return Err(Error::internal(format!("ONNX Runtime gave no buffer for element {i} of '{name}'")));
            }
            // SAFETY: `buf` holds `e.len()` writable bytes (above); `e` is request memory, a different
            // allocation, so the ranges cannot overlap.
            unsafe { std::ptr::copy_nonoverlapping(e.as_ptr(), buf.cast::<u8>(), e.len()) };
        }
    }
    Ok(v)
}

/// The elements of a string output in Triton's BYTES layout, read with their lengths
/// (`GetStringTensorContent`), so NUL and non-UTF-8 bytes come back intact.
fn string_elements(name: &str, value: &DynValue) -> Result<Vec<u8>> {
    let count = match value.dtype() {
        ValueType::Tensor { shape, .. } => {
            shape.iter().try_fold(1usize, |n, &d| n.checked_mul(usize::try_from(d).ok()?))
        }
        _ => None,
    }
    .ok_or_else(|| Error::internal(format!("output '{name}' has no valid shape")))?;
    let api = ort::api();
    let what = format!("cannot read string output '{name}'");
    let mut total = 0usize;
    // SAFETY: `value` is a live string tensor (its dtype says so) and `total` a valid out pointer.
    ort_status(unsafe { (api.GetStringTensorDataLength)(value.ptr(), &mut total) }, &what)?;
    let mut data = vec![0u8; total];
    let mut offsets = vec![0usize; count];
    if count > 0 {
        // SAFETY: `data` holds the `total` bytes ORT just reported for this tensor and `offsets` one slot
        // per element (`count`, from the tensor's own shape); ORT writes at most that much into each.
        let status = unsafe {
            (api.GetStringTensorContent)(value.ptr(), data.as_mut_ptr().cast(), total, offsets.as_mut_ptr(), count)
        };
        ort_status(status, &what)?;
    }
    let mut out = Vec::with_capacity(total + 4 * count);
    for i in 0..count {
        let start = offsets[i];
        let end = if i + 1 < count { offsets[i + 1] } else { total };
        let e = data.get(start..end).ok_or_else(|| Error::internal(format!("{what}: bad element offsets")))?;
        out.extend_from_slice(&(e.len() as u32).to_le_bytes());
        out.extend_from_slice(e);
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
