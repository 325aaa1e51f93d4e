//! What the TensorRT backend knows about an engine, independent of TensorRT itself: its I/O tensors and
//! optimization profiles ([`EngineDesc`]), and the decisions taken from them: checking a configuration
//! against the engine, completing one from it, which profile serves a request, and whether a shape fits.
//! The real engine (`ffi.rs`) and the mock used in tests both describe themselves this way.

use crate::error::{Error, Result};
use crate::model_api::types::DataType;
use crate::model_config::autocomplete::{IoInfo, ModelIoInfo};
use crate::proto::inference::ModelConfig;

/// `nvinfer1::DataType` values, and the Triton datatype each maps to (`None`: no Triton equivalent).
pub fn from_trt_dtype(v: i32) -> Option<DataType> {
    Some(match v {
        0 => DataType::Fp32,  // kFLOAT
        1 => DataType::Fp16,  // kHALF
        2 => DataType::Int8,  // kINT8
        3 => DataType::Int32, // kINT32
        4 => DataType::Bool,  // kBOOL
        5 => DataType::Uint8, // kUINT8
        7 => DataType::Bf16,  // kBF16 (TensorRT 9+)
        8 => DataType::Int64, // kINT64 (TensorRT 10+)
        _ => return None,     // kFP8, kINT4, kFP4, ...: no Triton type
    })
}

/// One I/O tensor of an engine.
#[derive(Debug, Clone, PartialEq)]
pub struct IoDesc {
    pub name: String,
    pub input: bool,
    /// The `nvinfer1::DataType` value.
    pub trt_dtype: i32,
    /// The engine's dims, -1 where dynamic.
    pub dims: Vec<i64>,
    /// A shape tensor (its values set shapes); not served.
    pub shape_tensor: bool,
    /// Lives in host memory (TensorRT's `TensorLocation::kHOST`).
    pub host: bool,
    /// A vectorized, not row-major, format.
    pub not_linear: bool,
}

impl IoDesc {
    pub fn datatype(&self) -> Option<DataType> {
        from_trt_dtype(self.trt_dtype)
    }
}

/// One optimization profile's range for one input.
#[derive(Debug, Clone, PartialEq)]
pub struct Range {
    pub min: Vec<i64>,
    pub opt: Vec<i64>,
    pub max: Vec<i64>,
}

impl Range {
    pub fn contains(&self, shape: &[i64]) -> bool {
        shape.len() == self.min.len()
            && shape.len() == self.max.len()
            && shape.iter().zip(&self.min).zip(&self.max).all(|((&d, &lo), &hi)| d >= lo && d <= hi)
    }
}

/// An engine's I/O and profiles.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct EngineDesc {
    pub io: Vec<IoDesc>,
    /// `profiles[p][i]`: profile `p`'s range for I/O tensor `i` (`None` for outputs and static inputs).
    pub profiles: Vec<Vec<Option<Range>>>,
    /// An implicit-batch engine (TensorRT < 10, built without explicit batch).
    pub implicit_batch: bool,
}

impl EngineDesc {
    pub fn index(&self, name: &str) -> Option<usize> {
        self.io.iter().position(|t| t.name == name)
    }

    /// The engine's I/O as the configuration checks and auto-complete read it.
    pub fn io_info(&self) -> ModelIoInfo {
        let info = |t: &IoDesc| IoInfo {
            name: t.name.clone(),
            data_type: t.datatype().map_or(0, DataType::to_config),
            dims: t.dims.clone(),
        };
        ModelIoInfo {
            inputs: self.io.iter().filter(|t| t.input).map(info).collect(),
            outputs: self.io.iter().filter(|t| !t.input).map(info).collect(),
        }
    }

    /// Whether every I/O tensor has a dynamic first dimension, so the engine can batch.
    pub fn can_batch(&self) -> bool {
        !self.io.is_empty() && self.io.iter().all(|t| t.dims.first() == Some(&-1))
    }

    /// The largest batch profile `p` accepts: the smallest maximum first dimension over its inputs.
    pub fn profile_max_batch(&self, p: usize) -> Option<i64> {
        let ranges = self.profiles.get(p)?;
        self.io
            .iter()
            .enumerate()
            .filter(|(_, t)| t.input)
            .filter_map(|(i, _)| ranges.get(i).and_then(Option::as_ref).and_then(|r| r.max.first().copied()))
            .min()
    }

    /// The largest batch any of `profiles` accepts (every profile when empty).
    pub fn max_batch(&self, profiles: &[usize]) -> Option<i64> {
        let all: Vec<usize> = (0..self.profiles.len()).collect();
        let list = if profiles.is_empty() { &all[..] } else { profiles };
        list.iter().filter_map(|&p| self.profile_max_batch(p)).max()
    }
}

/// Completes a configuration from the engine, as Triton's TensorRT backend does: inputs and outputs
/// with their datatypes and dims, and `max_batch_size` from the optimization profiles when every tensor
/// has a dynamic first dimension.
pub fn auto_complete(cfg: &mut ModelConfig, desc: &EngineDesc) {
    if cfg.platform.is_empty() && (cfg.backend.is_empty() || cfg.backend == "tensorrt") {
        cfg.platform = "tensorrt_plan".into();
    }
    if cfg.backend.is_empty() {
        cfg.backend = "tensorrt".into();
    }
    let max_batch = if desc.can_batch() { desc.max_batch(&[]).unwrap_or(0) } else { 0 };
    let max_batch = i32::try_from(max_batch).unwrap_or(i32::MAX);
    crate::model_config::autocomplete::complete_onnx(cfg, &desc.io_info(), max_batch);
}

/// The profiles an instance may use: its group's `profile` list, or all of them.
pub fn instance_profiles(desc: &EngineDesc, model: &str, listed: &[String]) -> Result<Vec<usize>> {
    let n = desc.profiles.len().max(1);
    if listed.is_empty() {
        return Ok((0..n).collect());
    }
    listed
        .iter()
        .map(|p| {
            p.trim().parse::<usize>().ok().filter(|&i| i < n).ok_or_else(|| {
                Error::invalid(format!(
                    "model '{model}': instance_group profile '{p}' does not exist: the engine has {n} optimization \
                     profile(s), numbered 0 to {}",
                    n - 1
                ))
            })
        })
        .collect()
}

/// The profiles an instance takes among its `candidates`, given how many live instances of the same
/// engine hold each profile (`held[p]`). TensorRT runs one execution context per optimization profile
/// at a time, so instances should not share one; and an instance must still serve every shape its
/// candidates serve. Candidates with the same ranges are interchangeable: the instance takes one of
/// each such group, a free one where there is one (an engine built with N identical profiles serves N
/// instances side by side), else the least held, which it then shares (runs on a shared profile take
/// turns; see `TensorRtInstance`). Returned in candidate order.
pub fn assign_profiles(desc: &EngineDesc, candidates: &[usize], held: &[usize]) -> Vec<usize> {
    let ranges = |p: usize| desc.profiles.get(p);
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for &p in candidates {
        match groups.iter_mut().find(|g| ranges(g[0]) == ranges(p)) {
            Some(g) => g.push(p),
            None => groups.push(vec![p]),
        }
    }
    let count = |p: usize| held.get(p).copied().unwrap_or(0);
    let mut out: Vec<usize> = groups
        .iter()
        .filter_map(|g| g.iter().copied().min_by_key(|&p| (count(p), candidates.iter().position(|&c| c == p))))
        .collect();
    out.sort_by_key(|&p| candidates.iter().position(|&c| c == p));
    out
}

/// Checks a configuration against the engine at load: what TensorRT cannot serve, the tensors, and
/// `max_batch_size` against the profiles the instance uses.
pub fn check(cfg: &ModelConfig, desc: &EngineDesc, profiles: &[usize]) -> Result<()> {
    let model = &cfg.name;
    if desc.implicit_batch {
        return Err(Error::invalid(format!(
            "model '{model}': the engine uses an implicit batch dimension, which this server does not serve; \
             build it with an explicit batch (as trtexec --onnx does)"
        )));
    }
    for t in &desc.io {
        let what = if t.input { "input" } else { "output" };
        if t.shape_tensor {
            return Err(Error::invalid(format!(
                "model '{model}': {what} '{}' is a shape tensor, which this server does not serve",
                t.name
            )));
        }
        if t.datatype().is_none() {
            return Err(Error::invalid(format!(
                "model '{model}': {what} '{}' has TensorRT data type {}, which has no Triton equivalent",
                t.name, t.trt_dtype
            )));
        }
        if t.not_linear {
            return Err(Error::invalid(format!(
                "model '{model}': {what} '{}' uses a vectorized format; only linear (row-major) I/O is served",
                t.name
            )));
        }
        if t.host {
            return Err(Error::invalid(format!(
                "model '{model}': {what} '{}' lives in host memory, which this server does not serve",
                t.name
            )));
        }
    }
    crate::model_config::autocomplete::check_io(cfg, &desc.io_info(), "TensorRT engine")?;
    if cfg.max_batch_size > 0 {
        if !desc.can_batch() {
            let fixed = desc.io.iter().find(|t| t.dims.first() != Some(&-1)).map_or("?", |t| t.name.as_str());
            return Err(Error::invalid(format!(
                "model '{model}': max_batch_size is {} but the engine's tensor '{fixed}' has no dynamic first \
                 dimension to batch along",
                cfg.max_batch_size
            )));
        }
        if let Some(limit) = desc.max_batch(profiles) {
            if i64::from(cfg.max_batch_size) > limit {
                return Err(Error::invalid(format!(
                    "model '{model}': max_batch_size {} is larger than the {limit} the engine's optimization \
                     profile(s) {profiles:?} allow",
                    cfg.max_batch_size
                )));
            }
        }
    }
    Ok(())
}

/// The first of `candidates` whose ranges hold every input shape (Triton's rule), or an error naming
/// the first input that no candidate takes.
pub fn select_profile(desc: &EngineDesc, candidates: &[usize], inputs: &[(usize, &[i64])]) -> Result<usize> {
    if desc.profiles.is_empty() {
        return Ok(0);
    }
    // Whether profile `p` takes input `i` with `shape`.
    let fits = |p: usize, i: usize, shape: &[i64]| match desc.profiles.get(p).and_then(|r| r.get(i)) {
        Some(Some(range)) => range.contains(shape),
        // A static input: its shape must be the engine's.
        _ => desc
            .io
            .get(i)
            .is_some_and(|t| t.dims.len() == shape.len() && t.dims.iter().zip(shape).all(|(&a, &b)| a == -1 || a == b)),
    };
    if let Some(&p) = candidates.iter().find(|&&p| inputs.iter().all(|&(i, shape)| fits(p, i, shape))) {
        return Ok(p);
    }
    // Name what does not fit, with the ranges on offer.
    let (i, shape) = inputs
        .iter()
        .find(|&&(i, shape)| !candidates.iter().any(|&p| fits(p, i, shape)))
        .copied()
        .unwrap_or(inputs.first().copied().unwrap_or((0, &[])));
    let name = desc.io.get(i).map_or("?", |t| t.name.as_str());
    let ranges: Vec<String> = candidates
        .iter()
        .filter_map(|&p| {
            desc.profiles
                .get(p)
                .and_then(|r| r.get(i))
                .and_then(Option::as_ref)
                .map(|r| format!("profile {p}: {:?} to {:?}", r.min, r.max))
        })
        .collect();
    Err(Error::invalid(format!(
        "input '{name}' has shape {shape:?}, which no optimization profile of this instance accepts ({})",
        if ranges.is_empty() { "no ranges".to_string() } else { ranges.join("; ") }
    )))
}

#[cfg(test)]
mod tests;
