//! Checks a request against its model's configuration before it is queued: names, datatypes, shapes
//! (with `-1` wildcards), batch size, byte sizes, `reshape` and `optional`.

use crate::core::scheduler::RequestControl;
use crate::error::{Error, Result};
use crate::model_api::types::{
    bytes_elements, element_count, DataType, InferRequest, ParamValue, Parameters, RequestedOutput, Tensor,
};
use crate::model_api::SequenceId;
use crate::model_api::{ExecRequest, RequestMeta};
use crate::proto::inference::ModelConfig;
use std::sync::Arc;
use std::time::Duration;

/// One configured input or output.
#[derive(Debug, Clone)]
pub struct TensorSpec {
    pub name: String,
    pub datatype: DataType,
    /// Dimensions as the client sees them, without the batch dimension.
    pub dims: Vec<i64>,
    /// Dimensions as the model sees them, when they differ (`reshape`).
    pub reshape: Option<Vec<i64>>,
    pub optional: bool,
}

/// A model's interface, derived once from its configuration at load time.
#[derive(Debug, Clone)]
pub struct ModelIo {
    /// 0 means the model does not batch.
    pub max_batch_size: i64,
    pub inputs: Vec<TensorSpec>,
    pub outputs: Vec<TensorSpec>,
}

impl ModelIo {
    pub fn from_config(cfg: &ModelConfig) -> Result<ModelIo> {
        let dt = |name: &str, v: i32| {
            DataType::from_config(v)
                .ok_or_else(|| Error::invalid(format!("model '{}': tensor '{name}' has no valid data_type", cfg.name)))
        };
        let inputs = cfg
            .input
            .iter()
            .map(|i| {
                Ok(TensorSpec {
                    name: i.name.clone(),
                    datatype: dt(&i.name, i.data_type)?,
                    dims: i.dims.clone(),
                    reshape: i.reshape.as_ref().map(|r| r.shape.clone()),
                    optional: i.optional,
                })
            })
            .collect::<Result<_>>()?;
        let outputs = cfg
            .output
            .iter()
            .map(|o| {
                Ok(TensorSpec {
                    name: o.name.clone(),
                    datatype: dt(&o.name, o.data_type)?,
                    dims: o.dims.clone(),
                    reshape: o.reshape.as_ref().map(|r| r.shape.clone()),
                    optional: false,
                })
            })
            .collect::<Result<_>>()?;
        Ok(ModelIo { max_batch_size: i64::from(cfg.max_batch_size), inputs, outputs })
    }

    pub fn output(&self, name: &str) -> Option<&TensorSpec> {
        self.outputs.iter().find(|o| o.name == name)
    }
}

/// A validated request, ready to queue.
#[derive(Debug)]
pub struct Prepared {
    pub exec: ExecRequest,
    /// The batch dimension (1 for non-batching models).
    pub batch_size: u32,
    /// The outputs to return, in order, with their classification settings.
    pub outputs: Vec<RequestedOutput>,
    /// Priority, timeout and sequence parameters.
    pub control: RequestControl,
}

fn shape_matches(expected: &[i64], actual: &[i64]) -> bool {
    expected.len() == actual.len() && expected.iter().zip(actual).all(|(&e, &a)| e == -1 || e == a)
}

fn fmt_shape(s: &[i64]) -> String {
    format!("[{}]", s.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(","))
}

/// Validates `req` for model `model` and turns it into an execution request.
pub fn prepare(io: &ModelIo, model: &str, req: InferRequest) -> Result<Prepared> {
    let control = control(&req.parameters)?;
    let batching = io.max_batch_size > 0;
    let mut batch: Option<i64> = None;
    let mut inputs = Vec::with_capacity(req.inputs.len());
    for mut t in req.inputs {
        let spec = check_input(io, model, &t, &inputs)?;
        if batching {
            check_batch(io, model, &t, &mut batch)?;
        }
        let count = element_count(&t.shape)
            .ok_or_else(|| Error::invalid(format!("input '{}': shape {} is too large", t.name, fmt_shape(&t.shape))))?;
        check_size(&t, count)?;
        if let Some(r) = &spec.reshape {
            let mut shape: Vec<i64> = if batching { vec![t.shape[0]] } else { Vec::new() };
            shape.extend(resolve_wildcards(r, count / batch.unwrap_or(1).max(1) as usize));
            t.shape = shape;
        }
        inputs.push(t);
    }
    check_required_inputs(io, model, &req.id, &inputs)?;
    let outputs = requested_outputs(io, model, req.outputs)?;
    let meta = RequestMeta {
        id: req.id,
        parameters: req.parameters.into_iter().filter(|(k, _)| !RESERVED_PARAMETERS.contains(&k.as_str())).collect(),
        correlation_id: control.sequence_id.clone(),
        flags: u32::from(control.sequence_start) | (u32::from(control.sequence_end) << 1),
        callers: req.callers,
        signals: Default::default(),
        trace: req.trace,
    };
    Ok(Prepared {
        exec: ExecRequest {
            inputs,
            outputs: outputs.iter().map(|o| o.name.clone()).collect(),
            meta: Arc::new(meta),
            responder: None,
        },
        batch_size: batch.unwrap_or(1) as u32,
        outputs,
        control,
    })
}

/// Checks input `t` against the model's inputs and the inputs accepted before it (`inputs`): the model
/// has it, the request names it once, and its datatype and shape (with the batch dimension for a
/// batching model) match. Returns its configuration.
fn check_input<'a>(io: &'a ModelIo, model: &str, t: &Tensor, inputs: &[Tensor]) -> Result<&'a TensorSpec> {
    let spec = io
        .inputs
        .iter()
        .find(|s| s.name == t.name)
        .ok_or_else(|| Error::invalid(format!("unexpected inference input '{}' for model '{model}'", t.name)))?;
    if inputs.iter().any(|i: &Tensor| i.name == t.name) {
        return Err(Error::invalid(format!("input '{}' appears more than once in the request", t.name)));
    }
    if t.datatype != spec.datatype {
        return Err(Error::invalid(format!(
            "inference input '{}' data-type is '{}', but model '{model}' expects '{}'",
            t.name, t.datatype, spec.datatype
        )));
    }
    if t.shape.iter().any(|&d| d < 0) {
        return Err(Error::invalid(format!(
            "input '{}' has a negative dimension in shape {}",
            t.name,
            fmt_shape(&t.shape)
        )));
    }
    let expected_full: Vec<i64> = if io.max_batch_size > 0 {
        std::iter::once(-1).chain(spec.dims.iter().copied()).collect()
    } else {
        spec.dims.clone()
    };
    if !shape_matches(&expected_full, &t.shape) {
        return Err(Error::invalid(format!(
            "unexpected shape for input '{}' for model '{model}'. Expected {}, got {}",
            t.name,
            fmt_shape(&expected_full),
            fmt_shape(&t.shape)
        )));
    }
    Ok(spec)
}

/// Checks the batch dimension of input `t` of a batching model: within `max_batch_size`, and the same
/// as the other inputs' (`batch`, set from the first input).
fn check_batch(io: &ModelIo, model: &str, t: &Tensor, batch: &mut Option<i64>) -> Result<()> {
    let b = t.shape[0];
    if b < 1 || b > io.max_batch_size {
        return Err(Error::invalid(format!(
            "inference request batch-size must be <= {} for '{model}', got {b} for input '{}'",
            io.max_batch_size, t.name
        )));
    }
    match *batch {
        None => *batch = Some(b),
        Some(prev) if prev != b => {
            return Err(Error::invalid(format!(
                "input '{}' has batch size {b} but other inputs have batch size {prev}",
                t.name
            )))
        }
        Some(_) => {}
    }
    Ok(())
}

/// Checks that the request (`inputs`) has every input the model does not mark optional, with
/// tritonserver's message (which names the request, the inputs given, sorted, and those missing).
fn check_required_inputs(io: &ModelIo, model: &str, id: &str, inputs: &[Tensor]) -> Result<()> {
    let missing: Vec<&str> = io
        .inputs
        .iter()
        .filter(|s| !s.optional && !inputs.iter().any(|t| t.name == s.name))
        .map(|s| s.name.as_str())
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let quoted = |names: &mut dyn Iterator<Item = &str>| names.map(|n| format!("'{n}'")).collect::<Vec<_>>().join(",");
    let mut given: Vec<&str> = inputs.iter().map(|t| t.name.as_str()).collect();
    given.sort_unstable();
    let required = io.inputs.iter().filter(|s| !s.optional).count();
    let expected = if required == io.inputs.len() {
        format!("expected {required} inputs")
    } else {
        format!("expected number of inputs between {required} and {}", io.inputs.len())
    };
    let id = if id.is_empty() { "<id_unknown>" } else { id };
    Err(Error::invalid(format!(
        "[request id: {id}] {expected} but got {} inputs for model '{model}'. Got input(s) [{}], but missing required \
         input(s) [{}]. Please provide all required input(s).",
        inputs.len(),
        quoted(&mut given.into_iter()),
        quoted(&mut missing.into_iter())
    )))
}

/// The outputs to return: those `requested`, each checked (the model has it, it is asked for once, and
/// classification is not asked of a BYTES output), or every output of the model when none is named.
fn requested_outputs(io: &ModelIo, model: &str, requested: Vec<RequestedOutput>) -> Result<Vec<RequestedOutput>> {
    if requested.is_empty() {
        return Ok(io.outputs.iter().map(|o| RequestedOutput { name: o.name.clone(), ..Default::default() }).collect());
    }
    let mut seen = std::collections::HashSet::new();
    for o in &requested {
        let spec = io
            .output(&o.name)
            .ok_or_else(|| Error::invalid(format!("unexpected inference output '{}' for model '{model}'", o.name)))?;
        if !seen.insert(o.name.as_str()) {
            return Err(Error::invalid(format!("output '{}' is requested more than once", o.name)));
        }
        if o.class_count > 0 && spec.datatype == DataType::Bytes {
            return Err(Error::invalid(format!(
                "classification is not supported for output '{}' of datatype BYTES",
                o.name
            )));
        }
    }
    Ok(requested)
}

/// Request parameters the server acts on itself; backends do not see them (as in Triton).
pub const RESERVED_PARAMETERS: &[&str] = &[
    "priority",
    "timeout",
    "sequence_id",
    "sequence_start",
    "sequence_end",
    "binary_data_output",
    "triton_enable_empty_final_response",
];

/// Reads the scheduling parameters Triton reserves: `priority`, `timeout` (microseconds), `sequence_id`
/// (unsigned integer or string; 0 and "" mean none), `sequence_start` and `sequence_end`.
pub fn control(params: &Parameters) -> Result<RequestControl> {
    let uint = |name: &str| -> Result<Option<u64>> {
        match params.get(name) {
            None => Ok(None),
            Some(ParamValue::Int(v)) if *v >= 0 => Ok(Some(*v as u64)),
            Some(ParamValue::Uint(v)) => Ok(Some(*v)),
            Some(_) => Err(Error::invalid(format!("parameter '{name}' must be a non-negative integer"))),
        }
    };
    let flag = |name: &str| -> Result<bool> {
        match params.get(name) {
            None => Ok(false),
            Some(ParamValue::Bool(b)) => Ok(*b),
            Some(_) => Err(Error::invalid(format!("parameter '{name}' must be a boolean"))),
        }
    };
    let priority = uint("priority")?.unwrap_or(0);
    let priority = u32::try_from(priority)
        .map_err(|_| Error::invalid(format!("parameter 'priority' {priority} is out of range")))?;
    let timeout = uint("timeout")?.map(Duration::from_micros);
    let id = match params.get("sequence_id") {
        None => None,
        Some(ParamValue::String(s)) => (!s.is_empty()).then(|| SequenceId::Str(s.clone())),
        Some(_) => uint("sequence_id")
            .map_err(|_| Error::invalid("parameter 'sequence_id' must be an unsigned integer or a string"))?
            .filter(|&v| v != 0)
            .map(SequenceId::U64),
    };
    Ok(RequestControl {
        priority,
        timeout,
        sequence_id: id,
        sequence_start: flag("sequence_start")?,
        sequence_end: flag("sequence_end")?,
    })
}

/// Checks that the data holds exactly `count` elements.
fn check_size(t: &Tensor, count: usize) -> Result<()> {
    match t.datatype.byte_size() {
        Some(size) => {
            let expected = count.saturating_mul(size);
            if t.data.len() != expected {
                return Err(Error::invalid(format!(
                    "unexpected total byte size {} for input '{}', expecting {expected}",
                    t.data.len(),
                    t.name
                )));
            }
        }
        None => {
            if let Some(bytes) = t.data.as_host() {
                let n = bytes_elements(bytes)?.len();
                if n != count {
                    return Err(Error::invalid(format!(
                        "input '{}' holds {n} BYTES elements but its shape {} needs {count}",
                        t.name,
                        fmt_shape(&t.shape)
                    )));
                }
            }
        }
    }
    Ok(())
}

/// Replaces a single `-1` in `dims` so the product equals `count`.
pub fn resolve_wildcards(dims: &[i64], count: usize) -> Vec<i64> {
    let known: i64 = dims.iter().filter(|&&d| d >= 0).product();
    dims.iter().map(|&d| if d == -1 && known > 0 { count as i64 / known } else { d }).collect()
}

#[cfg(test)]
mod tests;
