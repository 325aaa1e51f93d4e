//! The requests a tuning run sends: from `--input-data` (perf_analyzer's JSON format), from the
//! model's warmup samples, or random data shaped by the configuration (`--shape` for variable
//! dimensions, as perf_analyzer takes it). Each request carries batch 1 for a batching model.

use crate::core::warmup;
use crate::error::{Error, Result};
use crate::model_api::types::{serialize_bytes, DataType, InferRequest, Tensor};
use crate::proto::inference::ModelConfig;
use base64::Engine as _;
use serde_json::Value;
use std::collections::HashMap;
use std::path::Path;

/// The largest generated input, so a bad --shape cannot exhaust memory.
const MAX_INPUT_BYTES: usize = 256 << 20;

/// `NAME:d1,d2` from `--shape`.
pub fn parse_shapes(flags: &[String]) -> Result<HashMap<String, Vec<i64>>> {
    let mut out = HashMap::new();
    for f in flags {
        let (name, dims) = f
            .rsplit_once(':')
            .ok_or_else(|| Error::invalid(format!("--shape '{f}' is not NAME:DIM,DIM,... (e.g. INPUT0:3,224,224)")))?;
        let dims = dims
            .split(',')
            .map(|d| d.trim().parse::<i64>().ok().filter(|&v| v > 0))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| Error::invalid(format!("--shape '{f}': dimensions must be positive integers")))?;
        out.insert(name.to_string(), dims);
    }
    Ok(out)
}

/// The input's shape for one request, without the batch dimension: the configuration's dims with
/// `--shape` for variable ones (a variable dimension without one is 1, as perf_analyzer's default).
fn item_shape(name: &str, dims: &[i64], shapes: &HashMap<String, Vec<i64>>) -> Result<Vec<i64>> {
    if let Some(s) = shapes.get(name) {
        if s.len() != dims.len() || s.iter().zip(dims).any(|(&a, &b)| b >= 0 && a != b) {
            return Err(Error::invalid(format!("--shape for '{name}' does not fit its dims {dims:?}")));
        }
        return Ok(s.clone());
    }
    Ok(dims.iter().map(|&d| if d < 0 { 1 } else { d }).collect())
}

fn with_batch(cfg: &ModelConfig, shape: Vec<i64>) -> Vec<i64> {
    if cfg.max_batch_size > 0 {
        std::iter::once(1).chain(shape).collect()
    } else {
        shape
    }
}

fn request(model: &str, inputs: Vec<Tensor>) -> InferRequest {
    InferRequest { model_name: model.to_string(), inputs, ..Default::default() }
}

/// Random requests (a few different ones, so a response cache or a lucky branch does not flatter a
/// variant).
pub fn random(cfg: &ModelConfig, model: &str, shapes: &HashMap<String, Vec<i64>>) -> Result<Vec<InferRequest>> {
    let mut state = 0x9e37_79b9_u32;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        state
    };
    let mut out = Vec::new();
    for _ in 0..4 {
        let mut tensors = Vec::new();
        for input in &cfg.input {
            let dt = DataType::from_config(input.data_type)
                .ok_or_else(|| Error::invalid(format!("input '{}' has no valid data_type", input.name)))?;
            let shape = item_shape(&input.name, &input.dims, shapes)?;
            let count = shape.iter().product::<i64>().max(0) as usize;
            let data = match dt.byte_size() {
                Some(size) => {
                    let len = count
                        .checked_mul(size)
                        .filter(|&n| n <= MAX_INPUT_BYTES)
                        .ok_or_else(|| Error::invalid(format!("input '{}' would be over 256 MiB", input.name)))?;
                    let mut v = Vec::with_capacity(len);
                    for _ in 0..count {
                        push_random(&mut v, dt, next());
                    }
                    v
                }
                None => serialize_bytes((0..count).map(|_| format!("{}", next() % 1000).into_bytes())).to_vec(),
            };
            tensors.push(Tensor::new(input.name.clone(), dt, with_batch(cfg, shape), data));
        }
        out.push(request(model, tensors));
    }
    Ok(out)
}

/// One element of random data: floats in [0, 1) (normal numbers: subnormal inputs run far slower
/// on CPUs and would misjudge every variant), integers from 0 to 31 (small enough to be valid indexes
/// for most models), bools 0 or 1.
fn push_random(out: &mut Vec<u8>, dt: DataType, r: u32) {
    let start = out.len();
    out.resize(start + dt.byte_size().unwrap_or(0), 0);
    dt.write_sample(r, &mut out[start..]);
}

/// The model's warmup samples of batch 1 (or any batch for a model that does not batch), as requests.
pub fn from_warmup(cfg: &ModelConfig, model: &str, model_dir: &Path) -> Result<Vec<InferRequest>> {
    let samples = warmup::samples(cfg, model_dir, MAX_INPUT_BYTES)?;
    Ok(samples
        .into_iter()
        .filter(|s| cfg.max_batch_size == 0 || s.exec.inputs.first().and_then(|t| t.shape.first()) == Some(&1))
        .filter(|s| cfg.input.iter().filter(|i| !i.optional).all(|i| s.exec.inputs.iter().any(|t| t.name == i.name)))
        .map(|s| request(model, s.exec.inputs))
        .collect())
}

/// Requests from perf_analyzer's `--input-data` JSON: `{"data": [{"INPUT0": [..], "INPUT1": {"content":
/// [..], "shape": [..]}, "INPUT2": {"b64": ".."}}, ...]}`. Values are one request's worth (no batch
/// dimension); a flat list takes its shape from the configuration.
pub fn from_json(
    cfg: &ModelConfig,
    model: &str,
    path: &Path,
    shapes: &HashMap<String, Vec<i64>>,
) -> Result<Vec<InferRequest>> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::invalid(format!("cannot read --input-data '{}': {e}", path.display())))?;
    let doc: Value = serde_json::from_str(&text)
        .map_err(|e| Error::invalid(format!("--input-data '{}' is not JSON: {e}", path.display())))?;
    let entries = doc.get("data").and_then(Value::as_array).ok_or_else(|| {
        Error::invalid(format!("--input-data '{}' has no \"data\" list (perf_analyzer's format)", path.display()))
    })?;
    let mut out = Vec::new();
    for (i, entry) in entries.iter().enumerate() {
        let what = |name: &str| format!("--input-data entry {i}, input '{name}'");
        let mut tensors = Vec::new();
        for input in &cfg.input {
            let Some(v) = entry.get(&input.name) else {
                if input.optional {
                    continue;
                }
                return Err(Error::invalid(format!("{} is missing", what(&input.name))));
            };
            let dt = DataType::from_config(input.data_type)
                .ok_or_else(|| Error::invalid(format!("input '{}' has no valid data_type", input.name)))?;
            let (content, shape) = match v {
                Value::Object(o) if o.contains_key("b64") => {
                    let b64 = o.get("b64").and_then(Value::as_str).unwrap_or_default();
                    let bytes = base64::engine::general_purpose::STANDARD
                        .decode(b64)
                        .map_err(|e| Error::invalid(format!("{}: bad base64: {e}", what(&input.name))))?;
                    let shape = shape_of(o.get("shape"), &input.name, &input.dims, shapes)?;
                    tensors.push(Tensor::new(input.name.clone(), dt, with_batch(cfg, shape), bytes));
                    continue;
                }
                Value::Object(o) => (
                    o.get("content").cloned().unwrap_or(Value::Null),
                    shape_of(o.get("shape"), &input.name, &input.dims, shapes)?,
                ),
                other => (other.clone(), item_shape(&input.name, &input.dims, shapes)?),
            };
            let values = flatten(&content);
            let count = shape.iter().product::<i64>().max(0) as usize;
            if values.len() != count {
                return Err(Error::invalid(format!(
                    "{} has {} values, but its shape {shape:?} holds {count}",
                    what(&input.name),
                    values.len()
                )));
            }
            let data = encode(dt, &values).map_err(|e| Error::invalid(format!("{}: {e}", what(&input.name))))?;
            tensors.push(Tensor::new(input.name.clone(), dt, with_batch(cfg, shape), data));
        }
        out.push(request(model, tensors));
    }
    if out.is_empty() {
        return Err(Error::invalid(format!("--input-data '{}' lists no requests", path.display())));
    }
    Ok(out)
}

fn shape_of(v: Option<&Value>, name: &str, dims: &[i64], shapes: &HashMap<String, Vec<i64>>) -> Result<Vec<i64>> {
    match v.and_then(Value::as_array) {
        Some(a) => a
            .iter()
            .map(|d| d.as_i64().filter(|&d| d >= 0))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| Error::invalid(format!("--input-data: the shape of '{name}' is not a list of sizes"))),
        None => item_shape(name, dims, shapes),
    }
}

fn flatten(v: &Value) -> Vec<&Value> {
    match v {
        Value::Array(a) => a.iter().flat_map(flatten).collect(),
        other => vec![other],
    }
}

/// JSON values as the datatype's little-endian bytes (BYTES: Triton's length-prefixed elements).
fn encode(dt: DataType, values: &[&Value]) -> std::result::Result<Vec<u8>, String> {
    if dt == DataType::Bytes {
        let items: Vec<Vec<u8>> = values
            .iter()
            .map(|v| match v {
                Value::String(s) => s.as_bytes().to_vec(),
                other => other.to_string().into_bytes(),
            })
            .collect();
        return Ok(serialize_bytes(items).to_vec());
    }
    let mut out = Vec::with_capacity(values.len() * dt.byte_size().unwrap_or(1));
    for v in values {
        let f =
            v.as_f64().or_else(|| v.as_bool().map(|b| b as u8 as f64)).ok_or_else(|| format!("{v} is not a number"))?;
        match dt {
            DataType::Bool => out.push((f != 0.0) as u8),
            DataType::Uint8 => out.push(f as u8),
            DataType::Int8 => out.push(f as i8 as u8),
            DataType::Uint16 => out.extend((f as u16).to_le_bytes()),
            DataType::Int16 => out.extend((f as i16).to_le_bytes()),
            DataType::Uint32 => out.extend((f as u32).to_le_bytes()),
            DataType::Int32 => out.extend((f as i32).to_le_bytes()),
            DataType::Uint64 => out.extend((v.as_u64().unwrap_or(f as u64)).to_le_bytes()),
            DataType::Int64 => out.extend((v.as_i64().unwrap_or(f as i64)).to_le_bytes()),
            DataType::Fp16 => out.extend(half::f16::from_f64(f).to_le_bytes()),
            DataType::Bf16 => out.extend(half::bf16::from_f64(f).to_le_bytes()),
            DataType::Fp32 => out.extend((f as f32).to_le_bytes()),
            DataType::Fp64 => out.extend(f.to_le_bytes()),
            DataType::Bytes => unreachable!("handled above"),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
