//! The OpenVINO backend (`backend: "openvino"`): OpenVINO IR models (`model.xml` + `model.bin`)
//! served on OpenVINO's `CPU` device through its C API, with the library loaded at run time
//! (see `library`). Without OpenVINO, its models are UNAVAILABLE with a reason saying how to install
//! it; the server and its other models are not affected.
//!
//! Each instance has its own core, compiled model and infer request; an execution copies the inputs
//! into OpenVINO tensors, runs the request synchronously on the instance's thread and copies the
//! outputs out (OpenVINO reuses an infer request's output memory in the next run).

mod ffi;
pub mod formats;
mod library;

use crate::error::{Error, Result};
use crate::model_api::types::{DataType, Tensor};
use crate::model_api::{
    Backend, BackendConfig, ExecRequest, ExecResult, ExecTimings, InstanceKind, InstanceSpec, ModelContext,
    ModelInstance,
};
use crate::model_config::autocomplete::{IoInfo, ModelIoInfo};
use crate::model_config::ConfigFailure;
use crate::proto::inference::ModelConfig;
use bytes::Bytes;
use ffi::{Core, Dim, Model, PortInfo};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The backend's name in `config.pbtxt`.
pub const NAME: &str = "openvino";

/// The backend: stateless, as the library is loaded once per process (see `library`).
pub struct OpenVinoBackend;

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

/// The parameters of Triton's openvino backend (its README) that this backend applies, each to the
/// OpenVINO property of the same name on the CPU device.
const APPLIED: &[&str] =
    &["PERFORMANCE_HINT", "NUM_STREAMS", "INFERENCE_NUM_THREADS", "COMPILATION_NUM_THREADS", "HINT_BF16"];

/// Parameters of Triton's openvino backend that this backend does not apply yet (issue 34).
const NOT_YET: &[&str] =
    &["CPU_EXTENSION_PATH", "SKIP_OV_DYNAMIC_BATCHSIZE", "ENABLE_BATCH_PADDING", "RESHAPE_IO_LAYERS"];

/// Most threads a model may ask OpenVINO for (`INFERENCE_NUM_THREADS`, `COMPILATION_NUM_THREADS`).
const MAX_THREADS: u32 = 1024;

/// The OpenVINO properties the model's `parameters` ask for, checked: a bad value fails the load
/// naming the parameter and what it accepts. Unknown parameters, and the ones not applied yet, are
/// named in a warning for `instance`.
fn properties(ctx: &ModelContext, instance: &str) -> Result<Vec<(&'static str, String)>> {
    let mut keys: Vec<&String> = ctx.config.parameters.keys().collect();
    keys.sort();
    let mut props = Vec::new();
    for key in keys {
        let value = ctx.config.parameters[key].string_value.trim();
        let bad = |accepted: &str| {
            Error::invalid(format!("model '{}': parameter '{key}' is '{value}', but it accepts {accepted}", ctx.name))
        };
        let upper = value.to_ascii_uppercase();
        match key.as_str() {
            "PERFORMANCE_HINT" => match upper.as_str() {
                "LATENCY" | "THROUGHPUT" | "CUMULATIVE_THROUGHPUT" => props.push(("PERFORMANCE_HINT", upper)),
                _ => return Err(bad("LATENCY, THROUGHPUT or CUMULATIVE_THROUGHPUT")),
            },
            "NUM_STREAMS" => match upper.as_str() {
                "AUTO" | "NUMA" => props.push(("NUM_STREAMS", upper)),
                _ => match value.parse::<u32>() {
                    Ok(n) if (1..=MAX_THREADS).contains(&n) => props.push(("NUM_STREAMS", n.to_string())),
                    _ => return Err(bad(&format!("AUTO, NUMA or a number of streams from 1 to {MAX_THREADS}"))),
                },
            },
            "INFERENCE_NUM_THREADS" | "COMPILATION_NUM_THREADS" => match value.parse::<u32>() {
                Ok(n) if n <= MAX_THREADS => {
                    let k = if key == "INFERENCE_NUM_THREADS" {
                        "INFERENCE_NUM_THREADS"
                    } else {
                        "COMPILATION_NUM_THREADS"
                    };
                    props.push((k, n.to_string()))
                }
                _ => return Err(bad(&format!("a number of threads from 0 (OpenVINO's choice) to {MAX_THREADS}"))),
            },
            "SKIP_OV_DYNAMIC_BATCHSIZE" => {
                skip_dynamic_batch(&ctx.config)?;
            }
            "TF_GRAPH_TAG" | "TF_SIGNATURE_DEF" => formats::tensorflow_parameter(&ctx.name, instance, key, value),
            "HINT_BF16" => match upper.as_str() {
                "YES" => props.push(("INFERENCE_PRECISION_HINT", "bf16".into())),
                "NO" => {}
                _ => return Err(bad("YES or NO")),
            },
            k if NOT_YET.contains(&k) => tracing::warn!(
                "Instance '{instance}' of model '{}': parameter '{k}' of Triton's openvino backend is not \
                 supported by tritonrs yet and is ignored.",
                ctx.name
            ),
            k => {
                let hint = crate::model_config::pbtxt::closest(k, APPLIED.iter().chain(NOT_YET).copied())
                    .map(|c| format!(" (did you mean '{c}'?)"))
                    .unwrap_or_default();
                tracing::warn!(
                    "Instance '{instance}' of model '{}': parameter '{k}' is not one the openvino backend reads{hint}; \
                     it is ignored. The backend reads: {}.",
                    ctx.name,
                    APPLIED.join(", ")
                );
            }
        }
    }
    Ok(props)
}

/// With several CPU instances (`count: N`) and no `INFERENCE_NUM_THREADS`, each instance's share of
/// the cores this process may use: every instance runs its own requests at the same time, and N
/// instances each taking every core (OpenVINO's default) oversubscribe a 2-4-core board. `None`: one
/// instance, or the model chose its threads.
fn shared_threads(cfg: &ModelConfig, props: &[(&str, String)]) -> Option<usize> {
    use crate::proto::inference::model_instance_group::Kind;
    if props.iter().any(|(k, _)| *k == "INFERENCE_NUM_THREADS") {
        return None;
    }
    let instances: usize = cfg
        .instance_group
        .iter()
        .filter(|g| g.kind != Kind::Gpu as i32)
        .map(|g| usize::try_from(g.count.max(1)).unwrap_or(1))
        .sum();
    if instances <= 1 {
        return None;
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    Some((cores / instances).max(1))
}

/// `SKIP_OV_DYNAMIC_BATCHSIZE: YES`: the model's first dimension is left as the model has it.
fn skip_dynamic_batch(cfg: &ModelConfig) -> Result<bool> {
    let Some(p) = cfg.parameters.get("SKIP_OV_DYNAMIC_BATCHSIZE") else { return Ok(false) };
    match p.string_value.trim().to_ascii_uppercase().as_str() {
        "YES" => Ok(true),
        "NO" | "" => Ok(false),
        other => Err(Error::invalid(format!(
            "model '{}': parameter 'SKIP_OV_DYNAMIC_BATCHSIZE' is '{other}', but it accepts YES or NO",
            cfg.name
        ))),
    }
}

/// For a batching configuration (`max_batch_size > 0`), gives every input whose first dimension is
/// fixed (a model exported with batch 1) a dynamic first dimension from 1 to `max_batch_size`, as
/// Triton's openvino backend does, unless `SKIP_OV_DYNAMIC_BATCHSIZE` says not to. OpenVINO then
/// propagates the batch through the graph; a model whose graph cannot take it fails here with
/// OpenVINO's reason.
fn dynamic_batch(model: &mut Model, cfg: &ModelConfig) -> Result<()> {
    if cfg.max_batch_size <= 0 || skip_dynamic_batch(cfg)? {
        return Ok(());
    }
    let batch = Dim { min: 1, max: i64::from(cfg.max_batch_size) };
    let shapes: Vec<(String, Vec<Dim>)> = model
        .inputs()
        .map_err(Error::unavailable)?
        .into_iter()
        .filter_map(|p| {
            let dims = p.dims?;
            let first = *dims.first()?;
            first.is_fixed().then(|| (p.name, std::iter::once(batch).chain(dims[1..].iter().copied()).collect()))
        })
        .collect();
    if shapes.is_empty() {
        return Ok(());
    }
    model.reshape(&shapes).map_err(|e| {
        Error::unavailable(format!(
            "model '{}': OpenVINO cannot give the inputs a dynamic batch dimension up to max_batch_size {} (set \
             parameter SKIP_OV_DYNAMIC_BATCHSIZE to YES to keep the model's own): {e}",
            cfg.name, cfg.max_batch_size
        ))
    })
}

/// A core and the model read from the version's files (not compiled).
fn read_model(version_dir: &Path, cfg: &ModelConfig) -> Result<(Core, Model)> {
    library::load().map_err(Error::unavailable)?;
    let (file, bin) = model_files(version_dir, cfg)?;
    let core = Core::new().map_err(Error::unavailable)?;
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
                "instance '{}' is KIND_GPU, but the openvino backend runs on OpenVINO's CPU device (use KIND_CPU)",
                spec.name
            )));
        }
        model_files(&ctx.version_dir, &ctx.config).map(drop)
    }

    fn create_instance(&self, ctx: &ModelContext, spec: &InstanceSpec) -> Result<Box<dyn ModelInstance>> {
        let loaded = library::load().map_err(Error::unavailable)?;
        let (mut core, mut model) = read_model(&ctx.version_dir, &ctx.config)?;
        dynamic_batch(&mut model, &ctx.config)?;
        let (inputs, outputs) = ports(&model)?;
        let io = io_info(&inputs, &outputs, &ctx.config);
        crate::model_config::autocomplete::check_io(&ctx.config, &io, "OpenVINO model")?;
        let mut props = properties(ctx, &spec.name)?;
        if let Some(threads) = shared_threads(&ctx.config, &props) {
            props.push(("INFERENCE_NUM_THREADS", threads.to_string()));
        }
        for (key, value) in props {
            core.set_property("CPU", key, &value).map_err(|e| Error::invalid(format!("model '{}': {e}", ctx.name)))?;
        }
        let mut compiled = core.compile(&model, "CPU").map_err(Error::unavailable)?;
        // The model as read is not needed once compiled: its graph and weights go now.
        drop(model);
        // What OpenVINO made of the hints, as it reports them (each worth knowing on a 2-4-core board).
        let settings = ["PERFORMANCE_HINT", "NUM_STREAMS", "INFERENCE_NUM_THREADS"]
            .map(|k| format!("{k}={}", compiled.property(k).unwrap_or_else(|_| "?".into())))
            .join(", ");
        tracing::info!(
            "Instance '{}' of model '{}' runs on OpenVINO's CPU device with {settings}.",
            spec.name,
            ctx.name
        );
        let request = compiled.infer_request().map_err(Error::unavailable)?;
        Ok(Box::new(OpenVinoInstance {
            // By the names requests use (the configuration's), which may differ from OpenVINO's by `:0`.
            inputs: io.inputs.iter().map(|i| i.name.clone()).zip(inputs).collect(),
            outputs: io.outputs.iter().map(|o| o.name.clone()).zip(outputs.into_iter().map(|p| p.name)).collect(),
            request,
            _compiled: compiled,
            _core: core,
            served_by: format!("the openvino backend (OpenVINO {}, {})", loaded.version, loaded.path.display()),
        }))
    }
}

struct OpenVinoInstance {
    /// The model's inputs by the name requests use, to check requests against before OpenVINO sees them.
    inputs: HashMap<String, PortInfo>,
    /// OpenVINO's names of the outputs, by the name requests use.
    outputs: HashMap<String, String>,
    // Field order is drop order: the request before the compiled model before the core.
    request: ffi::InferRequest,
    _compiled: ffi::CompiledModel,
    _core: Core,
    served_by: String,
}

impl OpenVinoInstance {
    /// Checks request input `t` against the model (a mismatch is the client's error) and gives
    /// OpenVINO a copy of it.
    fn set_input(&mut self, t: &Tensor) -> Result<()> {
        let port = self.inputs.get(&t.name).ok_or_else(|| {
            let mut names: Vec<&str> = self.inputs.keys().map(String::as_str).collect();
            names.sort_unstable();
            Error::invalid(format!("the model has no input '{}' (it has: {})", t.name, names.join(", ")))
        })?;
        let elem = to_element_type(t.datatype).filter(|&e| e == port.elem).ok_or_else(|| {
            Error::invalid(format!(
                "input '{}' is {} but the model expects {}",
                t.name,
                t.datatype,
                from_element_type(port.elem).map_or_else(|| format!("element type {}", port.elem), |d| d.to_string())
            ))
        })?;
        if let Some(dims) = &port.dims {
            let fits = dims.len() == t.shape.len()
                && dims.iter().zip(&t.shape).all(|(d, &r)| r >= d.min && (d.max < 0 || r <= d.max));
            if !fits {
                return Err(Error::invalid(format!(
                    "input '{}' has shape {:?} but the model expects {:?} (-1: any size)",
                    t.name,
                    t.shape,
                    config_dims(dims)
                )));
            }
        }
        let bytes = t.data.as_host().ok_or_else(|| {
            Error::unsupported(format!("input '{}' is in device memory, which this backend cannot read", t.name))
        })?;
        self.request.set_input(&port.name, elem, &t.shape, bytes).map_err(Error::invalid)
    }
}

impl ModelInstance for OpenVinoInstance {
    fn execute(&mut self, req: &ExecRequest) -> Result<ExecResult> {
        let t0 = Instant::now();
        // An infer request keeps the tensors of its last run: an input left out (an `optional` one in
        // the configuration) would be read from the previous request, another client's data.
        if let Some(missing) = self.inputs.keys().find(|name| !req.inputs.iter().any(|t| &t.name == *name)) {
            return Err(Error::invalid(format!(
                "input '{missing}' is missing: the openvino backend needs every input of the model in each request"
            )));
        }
        for t in &req.inputs {
            self.set_input(t)?;
        }
        let t1 = Instant::now();
        self.request.infer().map_err(Error::internal)?;
        let t2 = Instant::now();
        let mut outputs: Vec<Tensor> = Vec::with_capacity(req.outputs.len());
        for name in &req.outputs {
            let port = self.outputs.get(name).unwrap_or(name);
            let (elem, dims, data) = self.request.output(port).map_err(Error::internal)?;
            let dt = from_element_type(elem).ok_or_else(|| {
                Error::internal(format!(
                    "output '{name}' has OpenVINO element type {elem}, which Triton cannot represent"
                ))
            })?;
            outputs.push(Tensor::new(name.as_str(), dt, dims, Bytes::from(data)));
        }
        let t3 = Instant::now();
        Ok(ExecResult { outputs, timings: ExecTimings::between(t0, t1, t2, t3), parameters: Default::default() })
    }

    fn served_by(&self) -> Option<String> {
        Some(self.served_by.clone())
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
        let io = read_model(&dir.join(v.to_string()), &cfg).and_then(|(_core, mut model)| {
            dynamic_batch(&mut model, &cfg)?;
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
