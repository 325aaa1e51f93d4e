//! A model's ONNX Runtime settings from `config.pbtxt`, with the names and values of Triton's
//! onnxruntime backend (2.51): `parameters` (thread counts, `execution_mode`, `enable_mem_arena`,
//! `enable_mem_pattern`, `memory.enable_memory_arena_shrinkage`, `session.*` config entries and the
//! CUDA execution provider's `gpu_mem_limit`, `arena_extend_strategy`, `cudnn_conv_algo_search`,
//! `do_copy_in_default_stream`) and `optimization { graph { level } }`.
//!
//! Read and checked here without ONNX Runtime, so a bad value is a load error naming the parameter
//! before any session is built; `onnx.rs` hands the result to ONNX Runtime.

use crate::error::{Error, Result};
use crate::proto::inference::ModelConfig;

/// Most threads a model may ask ONNX Runtime for in one pool (`intra_op_thread_count`,
/// `inter_op_thread_count`): each is an OS thread, created when the session is.
pub const MAX_ORT_THREADS: usize = 1024;

/// `optimization { graph { level } }` as Triton maps it onto ONNX Runtime's levels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GraphLevel {
    /// No level, or 0: every optimization (ONNX Runtime's default, `ORT_ENABLE_ALL`).
    All,
    /// -1: `ORT_ENABLE_BASIC`.
    Basic,
    /// 1: `ORT_ENABLE_EXTENDED`.
    Extended,
    /// 2: `ORT_DISABLE_ALL`.
    Disabled,
}

/// The model's settings for its sessions and runs.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub intra_op_threads: Option<usize>,
    pub inter_op_threads: Option<usize>,
    /// `execution_mode`: 1 runs independent nodes in parallel (`ORT_PARALLEL`).
    pub parallel: Option<bool>,
    pub graph_level: GraphLevel,
    /// `enable_mem_arena`: the CPU allocator's arena.
    pub mem_arena: Option<bool>,
    /// `enable_mem_pattern`.
    pub mem_pattern: Option<bool>,
    /// `session.*` parameters, passed to `AddSessionConfigEntry` as they are.
    pub session_entries: Vec<(String, String)>,
    /// Run options (`AddRunConfigEntry`) given to every run: `memory.enable_memory_arena_shrinkage`.
    pub run_entries: Vec<(String, String)>,
    /// CUDA execution provider options from `parameters`, with ONNX Runtime's names and values.
    pub cuda: Vec<(String, String)>,
    /// Parameters no part of the ONNX Runtime backend reads, for a warning.
    pub unknown: Vec<String>,
}

/// Parameters read elsewhere in the server for ONNX models (`image.*`: src/vision), which are not
/// reported as unknown.
const OTHER_PREFIXES: &[&str] = &["image."];

/// The run option Triton's backend reads from `parameters`.
const SHRINKAGE: &str = "memory.enable_memory_arena_shrinkage";

/// A bad value: a load error naming the model, the parameter and the value.
fn bad(model: &str, key: &str, v: &str, what: &str) -> Error {
    Error::invalid(format!("model '{model}': parameter '{key}' must be {what}, got '{v}'"))
}

/// Triton's `ParseBoolValue`: true/on/1 and false/off/0, in any case.
pub fn parse_bool(v: &str) -> Option<bool> {
    match v.trim().to_ascii_lowercase().as_str() {
        "true" | "on" | "1" => Some(true),
        "false" | "off" | "0" => Some(false),
        _ => None,
    }
}

fn threads(model: &str, key: &str, v: &str) -> Result<usize> {
    let n = v.trim().parse::<usize>().map_err(|_| bad(model, key, v, "a non-negative integer"))?;
    if n > MAX_ORT_THREADS {
        return Err(Error::invalid(format!(
            "model '{model}': parameter '{key}': {n} is over the limit of {MAX_ORT_THREADS} threads"
        )));
    }
    Ok(n)
}

/// An integer parameter that selects one of `names` (its index), as Triton's switch statements do.
fn choice(model: &str, key: &str, v: &str, names: &[&str]) -> Result<String> {
    let listed: Vec<String> = (0..names.len()).map(|i| i.to_string()).collect();
    v.trim()
        .parse::<usize>()
        .ok()
        .and_then(|i| names.get(i))
        .map(|n| n.to_string())
        .ok_or_else(|| bad(model, key, v, &format!("one of {}", listed.join(", "))))
}

/// `memory.enable_memory_arena_shrinkage`: `cpu:<id>` and `gpu:<id>` separated by ';', as ONNX Runtime
/// reads it.
fn shrinkage(model: &str, v: &str) -> Result<String> {
    let ok = !v.trim().is_empty()
        && v.trim().split(';').filter(|s| !s.is_empty()).all(|d| {
            d.split_once(':').is_some_and(|(dev, id)| matches!(dev, "cpu" | "gpu") && id.parse::<u32>().is_ok())
        });
    if !ok {
        return Err(bad(model, SHRINKAGE, v, "devices such as 'cpu:0' or 'cpu:0;gpu:0'"));
    }
    Ok(v.trim().to_string())
}

/// One CUDA execution provider parameter of `parameters` (Triton's deprecated but supported place),
/// as ONNX Runtime's option name and value; `None` when `key` is not one.
fn cuda_param(model: &str, key: &str, v: &str) -> Option<Result<(String, String)>> {
    let value = match key {
        "cudnn_conv_algo_search" => choice(model, key, v, &["EXHAUSTIVE", "HEURISTIC", "DEFAULT"]),
        "arena_extend_strategy" => choice(model, key, v, &["kNextPowerOfTwo", "kSameAsRequested"]),
        "gpu_mem_limit" => {
            v.trim().parse::<u64>().map(|n| n.to_string()).map_err(|_| bad(model, key, v, "a number of bytes"))
        }
        "do_copy_in_default_stream" => parse_bool(v)
            .map(|b| if b { "1" } else { "0" }.to_string())
            .ok_or_else(|| bad(model, key, v, "true or false")),
        _ => return None,
    };
    Some(value.map(|value| (key.to_string(), value)))
}

/// `optimization { graph { level } }`.
fn graph_level(cfg: &ModelConfig) -> Result<GraphLevel> {
    let Some(level) = cfg.optimization.as_ref().and_then(|o| o.graph.as_ref()).map(|g| g.level) else {
        return Ok(GraphLevel::All);
    };
    Ok(match level {
        0 => GraphLevel::All,
        -1 => GraphLevel::Basic,
        1 => GraphLevel::Extended,
        2 => GraphLevel::Disabled,
        other => {
            return Err(Error::invalid(format!(
                "model '{}': optimization.graph.level must be -1 (basic), 0 (all), 1 (extended) or 2 (none) for \
                 the ONNX Runtime backend, got {other}",
                cfg.name
            )))
        }
    })
}

/// Reads and checks a model's settings.
pub fn read(cfg: &ModelConfig) -> Result<Settings> {
    let model = cfg.name.as_str();
    let mut s = Settings {
        intra_op_threads: None,
        inter_op_threads: None,
        parallel: None,
        graph_level: graph_level(cfg)?,
        mem_arena: None,
        mem_pattern: None,
        session_entries: Vec::new(),
        run_entries: Vec::new(),
        cuda: Vec::new(),
        unknown: Vec::new(),
    };
    // Sorted, so entries and messages come in the same order each load.
    let mut keys: Vec<&String> = cfg.parameters.keys().collect();
    keys.sort();
    for key in keys {
        let v = cfg.parameters[key].string_value.as_str();
        let flag = |what: &str| parse_bool(v).ok_or_else(|| bad(model, key, v, what));
        match key.as_str() {
            "intra_op_thread_count" => s.intra_op_threads = Some(threads(model, key, v)?),
            "inter_op_thread_count" => s.inter_op_threads = Some(threads(model, key, v)?),
            "execution_mode" => {
                s.parallel = Some(match v.trim() {
                    "0" => false,
                    "1" => true,
                    _ => return Err(bad(model, key, v, "0 (sequential) or 1 (parallel)")),
                })
            }
            "enable_mem_arena" => s.mem_arena = Some(flag("1 or 0 (true or false)")?),
            "enable_mem_pattern" => s.mem_pattern = Some(flag("1 or 0 (true or false)")?),
            SHRINKAGE => s.run_entries.push((key.clone(), shrinkage(model, v)?)),
            k if k.starts_with("session.") && k.len() > "session.".len() => {
                s.session_entries.push((key.clone(), v.to_string()))
            }
            k => match cuda_param(model, k, v) {
                Some(entry) => s.cuda.push(entry?),
                None if OTHER_PREFIXES.iter().any(|p| k.starts_with(p)) => {}
                None => s.unknown.push(key.clone()),
            },
        }
    }
    Ok(s)
}

#[cfg(test)]
mod tests;
