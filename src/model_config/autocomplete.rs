//! Fills in what a model configuration leaves out, from the model file itself, as Triton's backends do.
//!
//! For ONNX models the graph's inputs and outputs are read straight from the `.onnx` protobuf, so
//! auto-complete (and `tritonrs validate`) works without loading ONNX Runtime.

use crate::error::{Error, Result};
use crate::proto::inference::{
    model_config::SchedulingChoice, ModelConfig, ModelDynamicBatching, ModelInput, ModelOutput,
};
use crate::proto::onnx;
use prost::Message;
use std::path::Path;

/// A model file's declared input or output.
#[derive(Debug, Clone, PartialEq)]
pub struct IoInfo {
    pub name: String,
    /// `inference.DataType` value, or 0 when the element type has no Triton equivalent.
    pub data_type: i32,
    /// Dimensions with `-1` for dynamic (named or unknown) ones.
    pub dims: Vec<i64>,
}

/// Inputs and outputs declared by a model file.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ModelIoInfo {
    pub inputs: Vec<IoInfo>,
    pub outputs: Vec<IoInfo>,
}

/// Maps an ONNX `TensorProto.DataType` to Triton's `inference.DataType`.
pub fn onnx_to_config_type(elem: i32) -> i32 {
    match elem {
        1 => 11,  // FLOAT -> TYPE_FP32
        2 => 2,   // UINT8
        3 => 6,   // INT8
        4 => 3,   // UINT16
        5 => 7,   // INT16
        6 => 8,   // INT32
        7 => 9,   // INT64
        8 => 13,  // STRING -> TYPE_STRING
        9 => 1,   // BOOL
        10 => 10, // FLOAT16 -> TYPE_FP16
        11 => 12, // DOUBLE -> TYPE_FP64
        12 => 4,  // UINT32
        13 => 5,  // UINT64
        16 => 14, // BFLOAT16 -> TYPE_BF16
        _ => 0,
    }
}

/// Reads the declared graph inputs (minus initializers) and outputs of an `.onnx` file.
pub fn read_onnx_io(path: &Path) -> Result<ModelIoInfo> {
    let bytes =
        std::fs::read(path).map_err(|e| Error::invalid(format!("cannot read ONNX model '{}': {e}", path.display())))?;
    onnx_io_from_bytes(&bytes).map_err(|e| e.context(format!("ONNX model '{}'", path.display())))
}

/// Parses ONNX model bytes into their declared inputs and outputs.
pub fn onnx_io_from_bytes(bytes: &[u8]) -> Result<ModelIoInfo> {
    let model = onnx::ModelProto::decode(bytes)
        .map_err(|e| Error::invalid(format!("the file is not a valid ONNX model: {e}")))?;
    let graph = model.graph.ok_or_else(|| Error::invalid("the ONNX model has no graph"))?;
    let initializers: std::collections::HashSet<&str> = graph.initializer.iter().map(|t| t.name.as_str()).collect();
    let convert = |v: &onnx::ValueInfoProto| -> IoInfo {
        let tensor = v.r#type.as_ref().and_then(|t| t.value.as_ref().map(|onnx::type_proto::Value::TensorType(t)| t));
        let (data_type, dims) = match tensor {
            Some(t) => (
                onnx_to_config_type(t.elem_type),
                t.shape
                    .as_ref()
                    .map(|s| {
                        s.dim
                            .iter()
                            .map(|d| match d.value {
                                Some(onnx::tensor_shape_proto::dimension::Value::DimValue(v)) if v >= 0 => v,
                                _ => -1,
                            })
                            .collect()
                    })
                    .unwrap_or_default(),
            ),
            None => (0, Vec::new()),
        };
        IoInfo { name: v.name.clone(), data_type, dims }
    };
    Ok(ModelIoInfo {
        inputs: graph.input.iter().filter(|i| !initializers.contains(i.name.as_str())).map(convert).collect(),
        outputs: graph.output.iter().map(convert).collect(),
    })
}

/// Completes `cfg` from the model's declared I/O, following the ONNX Runtime backend's rules: a batch
/// dimension is assumed when every input and output has a dynamic first dimension and the config says
/// nothing to the contrary; then `max_batch_size` becomes `default_max_batch_size` and dynamic batching
/// is enabled.
pub fn complete_onnx(cfg: &mut ModelConfig, io: &ModelIoInfo, default_max_batch_size: i32) {
    // A sequence model's control and state tensors are the server's business: they are never filled in
    // as inputs or outputs (a state output may still be listed on purpose, to return it to clients).
    let hidden = super::hidden_tensors(cfg);
    let visible_in: Vec<IoInfo> = io.inputs.iter().filter(|t| !hidden.is_input(&t.name)).cloned().collect();
    let visible_out: Vec<IoInfo> = io.outputs.iter().filter(|t| !hidden.is_output(&t.name)).cloned().collect();
    let io = &ModelIoInfo { inputs: visible_in, outputs: visible_out };
    let all = io.inputs.iter().chain(io.outputs.iter());
    let can_batch = !io.inputs.is_empty() && all.clone().all(|t| t.dims.first() == Some(&-1));
    if cfg.max_batch_size == 0 && can_batch && default_max_batch_size > 0 {
        // Config tensors written with the model's full rank mean the first dimension is not a batch.
        let full_rank_in_config = cfg
            .input
            .iter()
            .filter_map(|c| io.inputs.iter().find(|t| t.name == c.name).map(|t| (c.dims.len(), t.dims.len())))
            .chain(
                cfg.output
                    .iter()
                    .filter_map(|c| io.outputs.iter().find(|t| t.name == c.name).map(|t| (c.dims.len(), t.dims.len()))),
            )
            .any(|(cfg_rank, model_rank)| cfg_rank != 0 && cfg_rank == model_rank);
        if !full_rank_in_config {
            cfg.max_batch_size = default_max_batch_size;
            if cfg.scheduling_choice.is_none() {
                cfg.scheduling_choice = Some(SchedulingChoice::DynamicBatching(ModelDynamicBatching::default()));
            }
        }
    }
    let strip = |dims: &[i64]| -> Vec<i64> {
        if cfg.max_batch_size > 0 && !dims.is_empty() {
            dims[1..].to_vec()
        } else {
            dims.to_vec()
        }
    };
    // A config that lists tensors chooses which exist; only an empty list is filled from the model.
    let fill_inputs = cfg.input.is_empty();
    for t in &io.inputs {
        match cfg.input.iter_mut().find(|c| c.name == t.name) {
            Some(c) => complete_tensor(&mut c.data_type, &mut c.dims, c.reshape.is_some(), t, strip),
            None if fill_inputs => cfg.input.push(ModelInput {
                name: t.name.clone(),
                data_type: t.data_type,
                dims: strip(&t.dims),
                ..Default::default()
            }),
            None => {}
        }
    }
    let fill_outputs = cfg.output.is_empty();
    for t in &io.outputs {
        match cfg.output.iter_mut().find(|c| c.name == t.name) {
            Some(c) => complete_tensor(&mut c.data_type, &mut c.dims, c.reshape.is_some(), t, strip),
            None if fill_outputs => cfg.output.push(ModelOutput {
                name: t.name.clone(),
                data_type: t.data_type,
                dims: strip(&t.dims),
                ..Default::default()
            }),
            None => {}
        }
    }
    if cfg.backend.is_empty() {
        cfg.backend = "onnxruntime".into();
    }
    if cfg.platform.is_empty() {
        cfg.platform = "onnxruntime_onnx".into();
    }
}

/// Checks a configuration against the inputs and outputs its model file declares, as Triton's ONNX
/// Runtime backend does at load: every configured tensor exists in the model with the same datatype and
/// a compatible shape, and every model input is configured (or fed by the sequence batcher). A mismatch
/// fails the load, naming both sides, instead of failing every request later.
/// `what` names the model file's format in messages ("ONNX model").
pub fn check_io(cfg: &ModelConfig, io: &ModelIoInfo, what: &str) -> Result<()> {
    let model = &cfg.name;
    let type_name =
        |dt: i32| crate::model_api::types::DataType::from_config(dt).map_or("an unsupported type", |d| d.as_str());
    let find = |kind: &str, name: &str, list: &[IoInfo]| -> Result<IoInfo> {
        list.iter().find(|t| t.name == name).cloned().ok_or_else(|| {
            let names: Vec<&str> = list.iter().map(|t| t.name.as_str()).collect();
            Error::invalid(format!(
                "model '{model}': configuration {kind} '{name}' is not an {kind} of the {what} (it has: {})",
                names.join(", ")
            ))
        })
    };
    let check_type = |kind: &str, name: &str, configured: i32, t: &IoInfo| -> Result<()> {
        if configured != t.data_type {
            return Err(Error::invalid(format!(
                "model '{model}': {kind} '{name}' is {} in the {what} but the configuration says {}",
                type_name(t.data_type),
                type_name(configured)
            )));
        }
        Ok(())
    };
    let configured = cfg
        .input
        .iter()
        .map(|i| ("input", &i.name, i.data_type, &i.dims, i.reshape.as_ref(), i.allow_ragged_batch))
        .chain(cfg.output.iter().map(|o| {
            // An output scattered with an input's shape is flat in the model, like a ragged input.
            let scattered = cfg.batch_output.iter().any(|b| b.target_name.contains(&o.name));
            ("output", &o.name, o.data_type, &o.dims, o.reshape.as_ref(), scattered)
        }));
    for (kind, name, dt, dims, reshape, ragged) in configured {
        let t = find(kind, name, if kind == "input" { &io.inputs } else { &io.outputs })?;
        check_type(kind, name, dt, &t)?;
        // A ragged input reaches the model as one flat tensor, whatever its configured dims (and a
        // scattered output leaves it as one).
        if !ragged {
            check_shape(cfg, kind, name, &t.dims, reshape.map_or(dims.as_slice(), |r| r.shape.as_slice()))?;
        }
    }
    // A sequence model's control and implicit-state tensors are fed and read by the server, not listed
    // as inputs and outputs; they must still exist with the configured datatypes.
    let hidden = super::hidden_tensors(cfg);
    for (name, dt) in &hidden.inputs {
        check_type("input", name, dt.to_config(), &find("input", name, &io.inputs)?)?;
    }
    for (name, dt) in &hidden.outputs {
        check_type("output", name, dt.to_config(), &find("output", name, &io.outputs)?)?;
    }
    if let Some(t) = io.inputs.iter().find(|t| !hidden.is_input(&t.name) && !cfg.input.iter().any(|i| i.name == t.name))
    {
        return Err(Error::invalid(format!(
            "model '{model}': the {what} has input '{}' which the configuration does not declare",
            t.name
        )));
    }
    Ok(())
}

/// Compares a configured shape (`dims`, or `reshape` when set; without the batch dimension) with the
/// model's: a batching model needs a variable first dimension, the ranks must agree, and every fixed
/// model dimension must be configured as that size. A model tensor of unknown shape is not checked.
fn check_shape(cfg: &ModelConfig, kind: &str, name: &str, model_dims: &[i64], dims: &[i64]) -> Result<()> {
    if model_dims.is_empty() {
        return Ok(());
    }
    let show = |d: &[i64]| format!("[{}]", d.iter().map(i64::to_string).collect::<Vec<_>>().join(","));
    let batching = cfg.max_batch_size > 0;
    let full: Vec<i64> =
        if batching { std::iter::once(-1).chain(dims.iter().copied()).collect() } else { dims.to_vec() };
    if batching && model_dims[0] != -1 {
        return Err(Error::invalid(format!(
            "model '{}': {kind} '{name}': max_batch_size is {}, so the model's first dimension must be a \
             variable batch dimension, but the model's shape is {} (the configuration's is {} with the batch \
             dimension)",
            cfg.name,
            cfg.max_batch_size,
            show(model_dims),
            show(&full)
        )));
    }
    let fits = model_dims.len() == full.len() && model_dims.iter().zip(&full).all(|(&m, &c)| m == -1 || m == c);
    if !fits {
        let batch_note = if batching { format!(" ({} with the batch dimension)", show(&full)) } else { String::new() };
        return Err(Error::invalid(format!(
            "model '{}': {kind} '{name}': the configuration's shape {}{batch_note} does not match the model's \
             shape {}",
            cfg.name,
            show(dims),
            show(model_dims)
        )));
    }
    Ok(())
}

/// Fills a configured tensor's missing datatype and dims from the model.
fn complete_tensor(
    data_type: &mut i32,
    dims: &mut Vec<i64>,
    has_reshape: bool,
    t: &IoInfo,
    strip: impl Fn(&[i64]) -> Vec<i64>,
) {
    if *data_type == 0 {
        *data_type = t.data_type;
    }
    if dims.is_empty() && !has_reshape {
        *dims = strip(&t.dims);
    }
}

#[cfg(test)]
mod tests;
