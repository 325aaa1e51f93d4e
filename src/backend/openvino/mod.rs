//! The OpenVINO backend (`backend: "openvino"`): OpenVINO IR models (`model.xml` + `model.bin`)
//! served on OpenVINO's `CPU` device through its C API, with the library loaded at run time
//! (see `library`). Without OpenVINO, its models are UNAVAILABLE with a reason saying how to install
//! it; the server and its other models are not affected.
//!
//! Each instance has its own core, compiled model and infer request; an execution copies the inputs
//! into OpenVINO tensors, runs the request synchronously on the instance's thread and copies the
//! outputs out (OpenVINO reuses an infer request's output memory in the next run).

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
use openvino::{
    CompiledModel, Core, DeviceType, ElementType, InferRequest, Model, Node, PropertyKey, RwPropertyKey, Shape,
};
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

/// OpenVINO's error, with its last error message when it left one.
fn ov_err(what: impl std::fmt::Display, e: openvino::InferenceError) -> String {
    match e.message.filter(|m| !m.trim().is_empty()) {
        Some(m) => format!("{what}: {:?}: {}", e.kind, m.trim()),
        None => format!("{what}: {:?}", e.kind),
    }
}

/// The model file (the version's `model.xml`, or `default_model_filename`) and, for IR, its weights
/// file, both of which must exist.
fn model_files(version_dir: &Path, cfg: &ModelConfig) -> Result<(PathBuf, Option<PathBuf>)> {
    let file = crate::model_config::model_file(version_dir, cfg)?;
    if !file.is_file() {
        return Err(Error::unavailable(format!("model file '{}' not found", file.display())));
    }
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
fn properties(ctx: &ModelContext, instance: &str) -> Result<Vec<(RwPropertyKey, String)>> {
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
                "LATENCY" | "THROUGHPUT" | "CUMULATIVE_THROUGHPUT" => {
                    props.push((RwPropertyKey::HintPerformanceMode, upper))
                }
                _ => return Err(bad("LATENCY, THROUGHPUT or CUMULATIVE_THROUGHPUT")),
            },
            "NUM_STREAMS" => match upper.as_str() {
                "AUTO" | "NUMA" => props.push((RwPropertyKey::NumStreams, upper)),
                _ => match value.parse::<u32>() {
                    Ok(n) if (1..=MAX_THREADS).contains(&n) => props.push((RwPropertyKey::NumStreams, n.to_string())),
                    _ => return Err(bad(&format!("AUTO, NUMA or a number of streams from 1 to {MAX_THREADS}"))),
                },
            },
            "INFERENCE_NUM_THREADS" | "COMPILATION_NUM_THREADS" => match value.parse::<u32>() {
                Ok(n) if n <= MAX_THREADS => {
                    let k = match key.as_str() {
                        "INFERENCE_NUM_THREADS" => RwPropertyKey::InferenceNumThreads,
                        _ => RwPropertyKey::Other("COMPILATION_NUM_THREADS".into()),
                    };
                    props.push((k, n.to_string()))
                }
                _ => return Err(bad(&format!("a number of threads from 0 (OpenVINO's choice) to {MAX_THREADS}"))),
            },
            "SKIP_OV_DYNAMIC_BATCHSIZE" => {
                skip_dynamic_batch(&ctx.config)?;
            }
            "HINT_BF16" => match upper.as_str() {
                "YES" => props.push((RwPropertyKey::HintInferencePrecision, "bf16".into())),
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
    let (inputs, _) = ports(model)?;
    let batch = openvino::Dimension::new(1, i64::from(cfg.max_batch_size));
    let mut shapes = Vec::new();
    for p in &inputs {
        let Some(dims) = &p.dims else { continue };
        if dims.first().is_none_or(|&d| d < 0) {
            continue;
        }
        let rest =
            dims[1..]
                .iter()
                .map(|&d| if d < 0 { openvino::Dimension::new(-1, -1) } else { openvino::Dimension::new(d, d) });
        let all: Vec<openvino::Dimension> = std::iter::once(batch).chain(rest).collect();
        let rank = i64::try_from(all.len()).unwrap_or(i64::MAX);
        let shape = openvino::PartialShape::new(rank, &all).map_err(|e| {
            Error::unavailable(ov_err(format_args!("cannot make a batch shape for input '{}'", p.name), e))
        })?;
        shapes.push((p.name.clone(), shape));
    }
    if shapes.is_empty() {
        return Ok(());
    }
    let refs: Vec<(&str, &openvino::PartialShape)> = shapes.iter().map(|(n, s)| (n.as_str(), s)).collect();
    model.reshape(&refs).map_err(|e| {
        Error::unavailable(ov_err(
            format_args!(
                "model '{}': OpenVINO cannot give the inputs a dynamic batch dimension up to max_batch_size {} \
                 (set parameter SKIP_OV_DYNAMIC_BATCHSIZE to YES to keep the model's own)",
                cfg.name, cfg.max_batch_size
            ),
            e,
        ))
    })
}

/// A core and the model read from the version's files (not compiled).
fn read_model(version_dir: &Path, cfg: &ModelConfig) -> Result<(Core, Model)> {
    library::load().map_err(Error::unavailable)?;
    let (file, bin) = model_files(version_dir, cfg)?;
    let mut core = Core::new().map_err(|e| Error::unavailable(format!("cannot create an OpenVINO core: {e}")))?;
    let weights = match &bin {
        Some(b) => path_str(b)?,
        None => "",
    };
    let model = core
        .read_model_from_file(path_str(&file)?, weights)
        .map_err(|e| Error::unavailable(ov_err(format_args!("OpenVINO cannot read '{}'", file.display()), e)))?;
    Ok((core, model))
}

fn to_element_type(dt: DataType) -> Option<ElementType> {
    Some(match dt {
        DataType::Bool => ElementType::Boolean,
        DataType::Uint8 => ElementType::U8,
        DataType::Uint16 => ElementType::U16,
        DataType::Uint32 => ElementType::U32,
        DataType::Uint64 => ElementType::U64,
        DataType::Int8 => ElementType::I8,
        DataType::Int16 => ElementType::I16,
        DataType::Int32 => ElementType::I32,
        DataType::Int64 => ElementType::I64,
        DataType::Fp16 => ElementType::F16,
        DataType::Bf16 => ElementType::Bf16,
        DataType::Fp32 => ElementType::F32,
        DataType::Fp64 => ElementType::F64,
        // OpenVINO's string tensors hold C++ strings, which this backend does not build yet.
        DataType::Bytes => return None,
    })
}

fn from_element_type(t: ElementType) -> Option<DataType> {
    DataType::ALL.into_iter().find(|&d| to_element_type(d) == Some(t))
}

/// One model input or output as OpenVINO declares it.
#[derive(Debug, Clone)]
struct Port {
    name: String,
    elem: ElementType,
    /// `-1` for a dynamic dimension; `None` for a dynamic rank.
    dims: Option<Vec<i64>>,
}

fn describe(node: &Node, kind: &str, i: usize) -> Result<Port> {
    let err = |what: &str, e| Error::unavailable(ov_err(format_args!("cannot read the {what} of model {kind} {i}"), e));
    let name = node.get_name().map_err(|e| err("name", e))?;
    let elem = node.get_element_type().map_err(|e| err("element type", e))?;
    let shape = node.get_partial_shape().map_err(|e| err("shape", e))?;
    let dims = (!shape.get_rank().is_dynamic())
        .then(|| shape.get_dimensions().iter().map(|d| if d.is_dynamic() { -1 } else { d.get_min() }).collect());
    Ok(Port { name, elem, dims })
}

/// The model's inputs and outputs.
fn ports(model: &Model) -> Result<(Vec<Port>, Vec<Port>)> {
    let n_in = model.get_inputs_len().map_err(|e| Error::unavailable(ov_err("cannot count the model's inputs", e)))?;
    let n_out =
        model.get_outputs_len().map_err(|e| Error::unavailable(ov_err("cannot count the model's outputs", e)))?;
    let mut inputs = Vec::with_capacity(n_in);
    for i in 0..n_in {
        let node = model.get_input_by_index(i).map_err(|e| Error::unavailable(ov_err("cannot read an input", e)))?;
        inputs.push(describe(&node, "input", i)?);
    }
    let mut outputs = Vec::with_capacity(n_out);
    for i in 0..n_out {
        let node = model.get_output_by_index(i).map_err(|e| Error::unavailable(ov_err("cannot read an output", e)))?;
        outputs.push(describe(&node, "output", i)?);
    }
    Ok((inputs, outputs))
}

/// The ports as auto-complete and the load-time check read them (a dynamic rank as no dims).
fn io_info(inputs: &[Port], outputs: &[Port]) -> ModelIoInfo {
    let info = |p: &Port| IoInfo {
        name: p.name.clone(),
        data_type: from_element_type(p.elem).map_or(0, DataType::to_config),
        dims: p.dims.clone().unwrap_or_default(),
    };
    ModelIoInfo { inputs: inputs.iter().map(info).collect(), outputs: outputs.iter().map(info).collect() }
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
        crate::model_config::autocomplete::check_io(&ctx.config, &io_info(&inputs, &outputs), "OpenVINO model")?;
        for (key, value) in properties(ctx, &spec.name)? {
            core.set_property(&DeviceType::CPU, &key, &value).map_err(|e| {
                Error::invalid(ov_err(
                    format_args!("model '{}': OpenVINO's CPU device refuses {}={value}", ctx.name, key.as_ref()),
                    e,
                ))
            })?;
        }
        let mut compiled = core
            .compile_model(&model, DeviceType::CPU)
            .map_err(|e| Error::unavailable(ov_err("OpenVINO cannot compile the model for its CPU device", e)))?;
        // What OpenVINO made of the hints, as it reports them (each worth knowing on a 2-4-core board).
        let read = |k: RwPropertyKey| {
            let name = k.as_ref().to_string();
            let v = compiled.get_property(&PropertyKey::Rw(k)).map(|v| v.into_owned()).unwrap_or_else(|_| "?".into());
            format!("{name}={v}")
        };
        let settings =
            [RwPropertyKey::HintPerformanceMode, RwPropertyKey::NumStreams, RwPropertyKey::InferenceNumThreads]
                .map(read)
                .join(", ");
        tracing::info!(
            "Instance '{}' of model '{}' runs on OpenVINO's CPU device with {settings}.",
            spec.name,
            ctx.name
        );
        let request = compiled
            .create_infer_request()
            .map_err(|e| Error::unavailable(ov_err("OpenVINO cannot create an infer request", e)))?;
        Ok(Box::new(OpenVinoInstance {
            inputs: inputs.into_iter().map(|p| (p.name.clone(), p)).collect(),
            request,
            _compiled: compiled,
            _core: core,
            served_by: format!("OpenVINO {} ({})", loaded.version, loaded.path.display()),
        }))
    }
}

struct OpenVinoInstance {
    /// The model's inputs by name, to check requests against before OpenVINO sees them.
    inputs: HashMap<String, Port>,
    // Field order is drop order: the request before the compiled model before the core.
    request: InferRequest,
    _compiled: CompiledModel,
    _core: Core,
    served_by: String,
}

impl OpenVinoInstance {
    /// An OpenVINO tensor holding a copy of request input `t`, after checking its datatype and shape
    /// against the model (a mismatch is the client's error).
    fn input_tensor(&self, t: &Tensor) -> Result<openvino::Tensor> {
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
                from_element_type(port.elem).map_or_else(|| format!("{:?}", port.elem), |d| d.to_string())
            ))
        })?;
        if let Some(dims) = &port.dims {
            let fits = dims.len() == t.shape.len() && dims.iter().zip(&t.shape).all(|(&m, &r)| m < 0 || m == r);
            if !fits {
                return Err(Error::invalid(format!(
                    "input '{}' has shape {:?} but the model expects {:?} (-1: any size)",
                    t.name, t.shape, dims
                )));
            }
        }
        let bytes = t.data.as_host().ok_or_else(|| {
            Error::unsupported(format!("input '{}' is in device memory, which this backend cannot read", t.name))
        })?;
        let shape = Shape::new(&t.shape).map_err(|e| Error::invalid(ov_err(format_args!("input '{}'", t.name), e)))?;
        let mut tensor = openvino::Tensor::new(elem, &shape)
            .map_err(|e| Error::internal(ov_err(format_args!("cannot create OpenVINO tensor '{}'", t.name), e)))?;
        let dst = tensor
            .get_raw_data_mut()
            .map_err(|e| Error::internal(ov_err(format_args!("cannot fill OpenVINO tensor '{}'", t.name), e)))?;
        if dst.len() != bytes.len() {
            return Err(Error::invalid(format!(
                "input '{}' holds {} bytes but its shape {:?} of {} needs {}",
                t.name,
                bytes.len(),
                t.shape,
                t.datatype,
                dst.len()
            )));
        }
        dst.copy_from_slice(bytes);
        Ok(tensor)
    }
}

impl ModelInstance for OpenVinoInstance {
    fn execute(&mut self, req: &ExecRequest) -> Result<ExecResult> {
        let t0 = Instant::now();
        // The tensors stay alive until the run is over: the request only refers to them.
        let mut held = Vec::with_capacity(req.inputs.len());
        for t in &req.inputs {
            let tensor = self.input_tensor(t)?;
            self.request
                .set_tensor(&t.name, &tensor)
                .map_err(|e| Error::invalid(ov_err(format_args!("OpenVINO refuses input '{}'", t.name), e)))?;
            held.push(tensor);
        }
        let t1 = Instant::now();
        self.request.infer().map_err(|e| Error::internal(ov_err("OpenVINO inference failed", e)))?;
        let t2 = Instant::now();
        let mut outputs: Vec<Tensor> = Vec::with_capacity(req.outputs.len());
        for name in &req.outputs {
            let out = self
                .request
                .get_tensor(name)
                .map_err(|e| Error::internal(ov_err(format_args!("the model produced no output '{name}'"), e)))?;
            let read = |e| Error::internal(ov_err(format_args!("cannot read output '{name}'"), e));
            let elem = out.get_element_type().map_err(read)?;
            let dt = from_element_type(elem).ok_or_else(|| {
                Error::internal(format!("output '{name}' has element type {elem:?}, which Triton cannot represent"))
            })?;
            let dims = out.get_shape().map_err(read)?.get_dimensions().to_vec();
            let data = Bytes::copy_from_slice(out.get_raw_data().map_err(read)?);
            outputs.push(Tensor::new(name.as_str(), dt, dims, data));
        }
        drop(held);
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
                let io = io_info(&inputs, &outputs);
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
