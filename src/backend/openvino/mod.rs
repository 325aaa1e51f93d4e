//! The OpenVINO backend (`backend: "openvino"`): OpenVINO IR models (`model.xml` + `model.bin`),
//! and the other formats OpenVINO's frontends read, served on an OpenVINO device (`CPU` unless the
//! model's `TARGET_DEVICE` says otherwise) through its C API, with the library loaded at run time
//! (see `library`). Without OpenVINO, its models are UNAVAILABLE with a reason saying how to install
//! it; the server and its other models are not affected.
//!
//! A model version is read and compiled once (`Compiled`): its `count: N` instances share the
//! compiled model, each with its own infer request (see `instance`), and OpenVINO gives each
//! instance a stream of its own unless the model chooses (see `settings`).

mod ffi;
pub mod formats;
mod instance;
mod library;
mod settings;
mod shapes;

use crate::error::{Error, Result};
use crate::model_api::types::DataType;
use crate::model_api::{Backend, BackendConfig, InstanceKind, InstanceSpec, ModelContext, ModelInstance};
use crate::model_config::autocomplete::{IoInfo, ModelIoInfo};
use crate::model_config::ConfigFailure;
use crate::proto::inference::ModelConfig;
use ffi::{Core, Dim, Model, PortInfo};
use settings::Settings;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};

/// The backend's name in `config.pbtxt`.
pub const NAME: &str = "openvino";

/// The backend. The library is loaded once per process (see `library`); the backend keeps the
/// compiled model of each loaded model version, which its instances share.
#[derive(Default)]
pub struct OpenVinoBackend {
    compiled: Mutex<Vec<SharedModel>>,
}

/// A compiled model and the load it belongs to: the configuration that load read (the same `Arc`
/// for every instance of one load; a reload reads a new one) and the version folder.
struct SharedModel {
    config: Weak<ModelConfig>,
    version_dir: PathBuf,
    model: Weak<Compiled>,
}

/// One model version, read and compiled: what its instances share.
struct Compiled {
    // Field order is drop order: the compiled model before the core that made it.
    compiled: ffi::CompiledModel,
    _core: Core,
    /// The model's inputs by the name requests use, to check requests against before OpenVINO sees them.
    inputs: HashMap<String, PortInfo>,
    /// OpenVINO's names of the outputs, by the name requests use.
    outputs: HashMap<String, String>,
    /// With `ENABLE_BATCH_PADDING`, the fixed batch smaller ones are padded to.
    padded_batch: Option<i64>,
    served_by: String,
}

/// Triton's `default-max-batch-size`, per backend or global; 4 when unset or not a number.
fn default_max_batch_size(config: &BackendConfig) -> i32 {
    let v = config
        .get(NAME, "default-max-batch-size")
        .or_else(|| config.global.get("default-max-batch-size").map(String::as_str));
    match v.map(|v| v.trim().parse::<i32>()) {
        None => 4,
        Some(Ok(n)) if n >= 0 => n,
        Some(_) => {
            tracing::warn!("default-max-batch-size for the openvino backend is not a non-negative integer; 4 is used.");
            4
        }
    }
}

/// The model file (the version's `model.xml`, or `default_model_filename`) and, for IR, its weights
/// file, both of which must exist.
fn model_files(version_dir: &Path, cfg: &ModelConfig) -> Result<(PathBuf, Option<PathBuf>)> {
    let file = crate::model_config::model_file(version_dir, cfg)?;
    formats::check_model_path(&file)?;
    if file.extension().is_some_and(|e| e == "xml") {
        let bin = file.with_extension("bin");
        if !bin.is_file() {
            return Err(Error::unavailable(format!(
                "the weights file '{}' of the OpenVINO IR '{}' is missing",
                bin.display(),
                file.display()
            )));
        }
        return Ok((file, Some(bin)));
    }
    Ok((file, None))
}

fn path_str(p: &Path) -> Result<&str> {
    p.to_str()
        .ok_or_else(|| Error::unavailable(format!("the path '{}' is not UTF-8, which OpenVINO needs", p.display())))
}

/// A core (with the model's custom operations, if any) and the model read from the version's files
/// (not compiled).
fn read_model(version_dir: &Path, cfg: &ModelConfig, extension: Option<&Path>) -> Result<(Core, Model)> {
    library::load().map_err(Error::unavailable)?;
    let (file, bin) = model_files(version_dir, cfg)?;
    let mut core = Core::new().map_err(Error::unavailable)?;
    if let Some(ext) = extension {
        core.add_extension(path_str(ext)?)
            .map_err(|e| Error::unavailable(format!("parameter CPU_EXTENSION_PATH: {e}")))?;
    }
    let weights = match &bin {
        Some(b) => path_str(b)?,
        None => "",
    };
    let model = core.read_model(path_str(&file)?, weights).map_err(Error::unavailable)?;
    Ok((core, model))
}

fn to_element_type(dt: DataType) -> Option<ffi::Elem> {
    Some(match dt {
        DataType::Bool => ffi::BOOLEAN,
        DataType::Uint8 => ffi::U8,
        DataType::Uint16 => ffi::U16,
        DataType::Uint32 => ffi::U32,
        DataType::Uint64 => ffi::U64,
        DataType::Int8 => ffi::I8,
        DataType::Int16 => ffi::I16,
        DataType::Int32 => ffi::I32,
        DataType::Int64 => ffi::I64,
        DataType::Fp16 => ffi::F16,
        DataType::Bf16 => ffi::BF16,
        DataType::Fp32 => ffi::F32,
        DataType::Fp64 => ffi::F64,
        // OpenVINO's string tensors hold C++ strings, which this backend does not build yet.
        DataType::Bytes => return None,
    })
}

fn from_element_type(t: ffi::Elem) -> Option<DataType> {
    DataType::ALL.into_iter().find(|&d| to_element_type(d) == Some(t))
}

/// A port's dimensions as the configuration writes them: `-1` for a dynamic one.
fn config_dims(dims: &[Dim]) -> Vec<i64> {
    dims.iter().map(|d| if d.is_fixed() { d.min } else { -1 }).collect()
}

/// The model's inputs and outputs.
fn ports(model: &Model) -> Result<(Vec<PortInfo>, Vec<PortInfo>)> {
    Ok((model.inputs().map_err(Error::unavailable)?, model.outputs().map_err(Error::unavailable)?))
}

/// The ports as auto-complete and the load-time check read them (a dynamic rank as no dims), each
/// under the name `cfg` gives it (see `formats::config_name`).
fn io_info(inputs: &[PortInfo], outputs: &[PortInfo], cfg: &ModelConfig) -> ModelIoInfo {
    let tf = formats::is_tensorflow(cfg);
    let info = |listed: &[&str], p: &PortInfo| IoInfo {
        name: formats::config_name(&p.name, listed, tf),
        data_type: from_element_type(p.elem).map_or(0, DataType::to_config),
        dims: p.dims.as_deref().map(config_dims).unwrap_or_default(),
    };
    let (ins, outs) = config_names(cfg);
    ModelIoInfo {
        inputs: inputs.iter().map(|p| info(&ins, p)).collect(),
        outputs: outputs.iter().map(|p| info(&outs, p)).collect(),
    }
}

/// The input and output names the configuration lists.
fn config_names(cfg: &ModelConfig) -> (Vec<&str>, Vec<&str>) {
    (cfg.input.iter().map(|i| i.name.as_str()).collect(), cfg.output.iter().map(|o| o.name.as_str()).collect())
}

impl Backend for OpenVinoBackend {
    fn name(&self) -> &'static str {
        NAME
    }

    fn check_instance(&self, ctx: &ModelContext, spec: &InstanceSpec) -> Result<()> {
        library::load().map_err(Error::unavailable)?;
        if let InstanceKind::Gpu { .. } = spec.kind {
            return Err(Error::unavailable(format!(
                "instance '{}' is KIND_GPU, which names an NVIDIA GPU; the openvino backend's instances are KIND_CPU, \
                 and parameter TARGET_DEVICE chooses OpenVINO's device (CPU, GPU, NPU, AUTO)",
                spec.name
            )));
        }
        model_files(&ctx.version_dir, &ctx.config).map(drop)
    }

    fn create_instance(&self, ctx: &ModelContext, spec: &InstanceSpec) -> Result<Box<dyn ModelInstance>> {
        let model = self.compiled_model(ctx)?;
        let request = model.compiled.infer_request().map_err(Error::unavailable)?;
        tracing::info!("Instance '{}' of model '{}' has an infer request on its compiled model.", spec.name, ctx.name);
        Ok(Box::new(instance::OpenVinoInstance { request, model }))
    }
}

impl OpenVinoBackend {
    /// The backend, with `--backend-config=openvino,library=PATH` recorded before anything loads
    /// OpenVINO (once per process; the TensorFlow backend and the completers read the same setting).
    pub fn new(config: &BackendConfig) -> Self {
        library::configure(config);
        OpenVinoBackend::default()
    }

    /// The compiled model of this load of `ctx`'s version: compiled by its first instance, shared by
    /// the others.
    fn compiled_model(&self, ctx: &ModelContext) -> Result<Arc<Compiled>> {
        let mut list = self.compiled.lock().unwrap_or_else(|p| p.into_inner());
        list.retain(|m| m.model.strong_count() > 0);
        let config = Arc::downgrade(&ctx.config);
        let same = |m: &&SharedModel| Weak::ptr_eq(&m.config, &config) && m.version_dir == ctx.version_dir;
        if let Some(model) = list.iter().find(same).and_then(|m| m.model.upgrade()) {
            return Ok(model);
        }
        let model = Arc::new(compile(ctx)?);
        list.push(SharedModel { config, version_dir: ctx.version_dir.clone(), model: Arc::downgrade(&model) });
        Ok(model)
    }
}

/// Reads, shapes and compiles the model for its device, with the properties its parameters ask for.
fn compile(ctx: &ModelContext) -> Result<Compiled> {
    let loaded = library::load().map_err(Error::unavailable)?;
    let settings = Settings::read(ctx)?;
    let (mut core, mut model) = read_model(&ctx.version_dir, &ctx.config, settings.extension.as_deref())?;
    settings::check_device(&settings.device, &core.available_devices().map_err(Error::unavailable)?)?;
    shapes::prepare(&mut model, &ctx.config, &settings)?;
    let (inputs, outputs) = ports(&model)?;
    let mut io = io_info(&inputs, &outputs, &ctx.config);
    if settings.skip_dynamic_batch && ctx.config.max_batch_size > 0 {
        // The model keeps its fixed batch (SKIP_OV_DYNAMIC_BATCHSIZE): the configuration's batch
        // dimension stands for it, and a request's batch is checked against it when it runs.
        io.inputs.iter_mut().chain(io.outputs.iter_mut()).filter_map(|p| p.dims.first_mut()).for_each(|d| *d = -1);
    }
    crate::model_config::autocomplete::check_io(&ctx.config, &io, "OpenVINO model")?;
    for (key, value) in &settings.properties {
        core.set_property(&settings.device, key, value)
            .map_err(|e| Error::invalid(format!("model '{}': {e}", ctx.name)))?;
    }
    let compiled = core.compile(&model, &settings.device).map_err(Error::unavailable)?;
    // The model as read is not needed once compiled: its graph and weights go now.
    drop(model);
    // What OpenVINO made of the hints, as it reports them (each worth knowing on a 2-4-core board).
    let reported = ["PERFORMANCE_HINT", "NUM_STREAMS", "INFERENCE_NUM_THREADS"]
        .map(|k| format!("{k}={}", compiled.property(k).unwrap_or_else(|_| "?".into())))
        .join(", ");
    warn_idle_streams(ctx, &compiled);
    tracing::info!(
        "Model '{}' version {} is compiled for OpenVINO's {} device with {reported}, for {} instance(s).",
        ctx.name,
        ctx.version,
        settings.device,
        settings::cpu_instances(&ctx.config)
    );
    if let Some(fixed) = shapes::fixed_batch(&inputs)
        .filter(|&b| settings.skip_dynamic_batch && b < i64::from(ctx.config.max_batch_size))
    {
        tracing::warn!(
            "Model '{}' keeps its fixed batch of {fixed} (SKIP_OV_DYNAMIC_BATCHSIZE) but its max_batch_size is {}: a \
             request or dynamic batch of more than {fixed} rows fails; set max_batch_size to {fixed}.",
            ctx.name,
            ctx.config.max_batch_size
        );
    }
    Ok(Compiled {
        padded_batch: shapes::padded_batch(&inputs, &ctx.config, &settings),
        // By the names requests use (the configuration's), which may differ from OpenVINO's by `:0`.
        inputs: io.inputs.iter().map(|i| i.name.clone()).zip(inputs).collect(),
        outputs: io.outputs.iter().map(|o| o.name.clone()).zip(outputs.into_iter().map(|p| p.name)).collect(),
        compiled,
        _core: core,
        served_by: format!("the openvino backend (OpenVINO {}, {})", loaded.version, loaded.path.display()),
    })
}

/// Each instance runs one infer request at a time, so streams beyond the instances stay idle: one
/// instance of a THROUGHPUT-hinted model uses one core's share of the machine (measured with
/// benches/openvino_compare.py: 0.5x of benchmark_app on 2 cores, against 0.9x with `count: 2`).
fn warn_idle_streams(ctx: &ModelContext, compiled: &ffi::CompiledModel) {
    let Ok(Ok(streams)) = compiled.property("NUM_STREAMS").map(|v| v.trim().parse::<usize>()) else { return };
    let instances = settings::cpu_instances(&ctx.config);
    if streams > instances {
        tracing::warn!(
            "Model '{}' is compiled with {streams} OpenVINO streams but has {instances} instance(s), each running one \
             request at a time: {} stream(s) stay idle. Set instance_group count to {streams} (or NUM_STREAMS to \
             {instances}).",
            ctx.name,
            streams - instances
        );
    }
}

/// Completes an OpenVINO model's configuration from the model (inputs, outputs, datatypes and
/// `max_batch_size`), as Triton's openvino backend does; this needs the library. Without it, a
/// configuration that already lists inputs and outputs is left as it is (the load then says why the
/// model is unavailable).
pub struct Completer {
    pub default_max_batch_size: i32,
}

impl Completer {
    pub fn new(config: &BackendConfig) -> Self {
        // Completion may be the first to load OpenVINO: the library setting must be known by then.
        library::configure(config);
        Completer { default_max_batch_size: default_max_batch_size(config) }
    }
}

impl crate::model_config::Completer for Completer {
    fn complete(
        &self,
        dir: &Path,
        name: &str,
        mut cfg: ModelConfig,
    ) -> std::result::Result<ModelConfig, ConfigFailure> {
        let Some(v) = crate::model_config::list_versions(dir).into_iter().next_back() else { return Ok(cfg) };
        let io = read_model(&dir.join(v.to_string()), &cfg, None).and_then(|(_core, mut model)| {
            // The batch as the model will have it; the configuration's dims are not complete yet.
            let skip = cfg
                .parameters
                .get("SKIP_OV_DYNAMIC_BATCHSIZE")
                .is_some_and(|p| p.string_value.trim().eq_ignore_ascii_case("yes"));
            let settings = Settings { skip_dynamic_batch: skip, ..Default::default() };
            shapes::prepare(&mut model, &cfg, &settings)?;
            ports(&model)
        });
        match io {
            Ok((inputs, outputs)) => {
                // complete_onnx fills an empty platform with ONNX's; Triton leaves it as the backend's name.
                if cfg.platform.is_empty() {
                    cfg.platform = NAME.into();
                }
                let io = io_info(&inputs, &outputs, &cfg);
                crate::model_config::autocomplete::complete_onnx(&mut cfg, &io, self.default_max_batch_size);
                Ok(cfg)
            }
            Err(_) if !cfg.input.is_empty() && !cfg.output.is_empty() => Ok(cfg),
            Err(e) => Err(ConfigFailure {
                error: e.context(format!("model '{name}': cannot complete the configuration from the OpenVINO model")),
                version: Some(v),
            }),
        }
    }
}

#[cfg(test)]
mod tests;
