//! `optimization { execution_accelerators { ... } }` for ONNX models, with the names and parameters of
//! Triton's onnxruntime backend: `tensorrt` for GPU instances (ONNX Runtime's TensorRT execution
//! provider, also the TensorRT path of JetPack's onnxruntime-gpu) and `openvino` for CPU instances.
//! Parsed and checked here without ONNX Runtime, so a bad parameter is a clear load error.

use crate::error::{Error, Result};
use crate::proto::inference::model_optimization_policy::execution_accelerators::Accelerator;
use crate::proto::inference::ModelConfig;
use std::path::{Path, PathBuf};

/// An execution provider a model asks for, with ONNX Runtime's option names and values.
#[derive(Debug, Clone, PartialEq)]
pub enum Accel {
    TensorRt(Vec<(String, String)>),
    OpenVino(Vec<(String, String)>),
    /// `cuda`: options of the CUDA execution provider that KIND_GPU instances always use.
    Cuda(Vec<(String, String)>),
}

impl Accel {
    /// The provider's name for messages.
    pub fn provider(&self) -> &'static str {
        match self {
            Accel::TensorRt(_) => "TensorRT",
            Accel::OpenVino(_) => "OpenVINO",
            Accel::Cuda(_) => "CUDA",
        }
    }
}

/// The accelerators of a model: for GPU instances and for CPU instances, in priority order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    pub gpu: Vec<Accel>,
    pub cpu: Vec<Accel>,
}

/// How a TensorRT parameter's value is checked and passed on.
enum Kind {
    Bool,
    Int,
    Text,
}

/// Triton's TensorRT accelerator parameters → ONNX Runtime's option names. `precision_mode` is handled
/// on its own (it sets `trt_fp16_enable` / `trt_int8_enable`).
const TENSORRT: &[(&str, &str, Kind)] = &[
    ("max_workspace_size_bytes", "trt_max_workspace_size", Kind::Int),
    ("trt_max_partition_iterations", "trt_max_partition_iterations", Kind::Int),
    ("trt_min_subgraph_size", "trt_min_subgraph_size", Kind::Int),
    ("int8_calibration_table_name", "trt_int8_calibration_table_name", Kind::Text),
    ("int8_use_native_calibration_table", "trt_int8_use_native_calibration_table", Kind::Bool),
    ("trt_dla_enable", "trt_dla_enable", Kind::Bool),
    ("trt_dla_core", "trt_dla_core", Kind::Int),
    ("trt_engine_cache_enable", "trt_engine_cache_enable", Kind::Bool),
    ("trt_engine_cache_path", "trt_engine_cache_path", Kind::Text),
    ("trt_engine_cache_prefix", "trt_engine_cache_prefix", Kind::Text),
    ("trt_dump_subgraphs", "trt_dump_subgraphs", Kind::Bool),
    ("trt_force_sequential_engine_build", "trt_force_sequential_engine_build", Kind::Bool),
    ("trt_context_memory_sharing_enable", "trt_context_memory_sharing_enable", Kind::Bool),
    ("trt_layer_norm_fp32_fallback", "trt_layer_norm_fp32_fallback", Kind::Bool),
    ("trt_timing_cache_enable", "trt_timing_cache_enable", Kind::Bool),
    ("trt_timing_cache_path", "trt_timing_cache_path", Kind::Text),
    ("trt_force_timing_cache", "trt_force_timing_cache", Kind::Bool),
    ("trt_detailed_build_log", "trt_detailed_build_log", Kind::Bool),
    ("trt_build_heuristics_enable", "trt_build_heuristics_enable", Kind::Bool),
    ("trt_sparsity_enable", "trt_sparsity_enable", Kind::Bool),
    ("trt_builder_optimization_level", "trt_builder_optimization_level", Kind::Int),
    ("trt_auxiliary_streams", "trt_auxiliary_streams", Kind::Int),
    ("trt_tactic_sources", "trt_tactic_sources", Kind::Text),
    ("trt_extra_plugin_lib_paths", "trt_extra_plugin_lib_paths", Kind::Text),
    ("trt_profile_min_shapes", "trt_profile_min_shapes", Kind::Text),
    ("trt_profile_max_shapes", "trt_profile_max_shapes", Kind::Text),
    ("trt_profile_opt_shapes", "trt_profile_opt_shapes", Kind::Text),
    ("trt_cuda_graph_enable", "trt_cuda_graph_enable", Kind::Bool),
    ("trt_dump_ep_context_model", "trt_dump_ep_context_model", Kind::Bool),
    ("trt_ep_context_file_path", "trt_ep_context_file_path", Kind::Text),
    ("trt_ep_context_embed_mode", "trt_ep_context_embed_mode", Kind::Int),
];

/// The CUDA execution provider's options a `cuda` accelerator may set (ONNX Runtime's names; Triton
/// passes them on as they are, and ONNX Runtime refuses unknown ones only when a GPU session is made,
/// so they are checked here). `device_id` and the stream are the instance's.
const CUDA: &[(&str, Kind)] = &[
    ("gpu_mem_limit", Kind::Int),
    ("arena_extend_strategy", Kind::Text),
    ("cudnn_conv_algo_search", Kind::Text),
    ("do_copy_in_default_stream", Kind::Bool),
    ("cudnn_conv_use_max_workspace", Kind::Bool),
    ("cudnn_conv1d_pad_to_nc1d", Kind::Bool),
    ("enable_cuda_graph", Kind::Bool),
    ("enable_skip_layer_norm_strict_mode", Kind::Bool),
    ("use_tf32", Kind::Bool),
    ("prefer_nhwc", Kind::Bool),
    ("use_ep_level_unified_stream", Kind::Bool),
    ("tunable_op_enable", Kind::Bool),
    ("tunable_op_tuning_enable", Kind::Bool),
    ("tunable_op_max_tuning_duration_ms", Kind::Int),
    ("sdpa_kernel", Kind::Int),
    ("fuse_conv_bias", Kind::Bool),
];

/// OpenVINO parameters Triton's backend passes on (`device_type`, `precision`, ...), as ONNX Runtime
/// names them.
const OPENVINO: &[(&str, Kind)] = &[
    ("device_type", Kind::Text),
    ("precision", Kind::Text),
    ("num_of_threads", Kind::Int),
    ("num_streams", Kind::Int),
    ("cache_dir", Kind::Text),
    ("enable_opencl_throttling", Kind::Bool),
    ("enable_qdq_optimizer", Kind::Bool),
    ("disable_dynamic_shapes", Kind::Bool),
];

/// Where TensorRT engines are cached unless `trt_engine_cache_path` says: the service's cache
/// directory (systemd's `CacheDirectory=`), else `$XDG_CACHE_HOME/tritonrs` or `~/.cache/tritonrs`.
pub fn default_cache_dir() -> PathBuf {
    let env = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(d) = env("CACHE_DIRECTORY") {
        // systemd may list several directories separated by ':'; ours is the first.
        let first = d.to_string_lossy().split(':').next().unwrap_or_default().to_string();
        return PathBuf::from(first);
    }
    env("XDG_CACHE_HOME")
        .map(|d| d.join("tritonrs"))
        .or_else(|| env("HOME").map(|h| h.join(".cache/tritonrs")))
        .unwrap_or_else(|| std::env::temp_dir().join("tritonrs-cache"))
}

fn value(model: &str, accel: &str, key: &str, v: &str, kind: &Kind) -> Result<String> {
    let bad = |what: &str| {
        Error::invalid(format!(
            "model '{model}': execution accelerator '{accel}' parameter '{key}' must be {what}, got '{v}'"
        ))
    };
    match kind {
        Kind::Bool => match v.trim().to_ascii_lowercase().as_str() {
            "true" | "1" => Ok("1".into()),
            "false" | "0" => Ok("0".into()),
            _ => Err(bad("true or false")),
        },
        Kind::Int => v.trim().parse::<i64>().map(|n| n.to_string()).map_err(|_| bad("an integer")),
        Kind::Text => Ok(v.to_string()),
    }
}

fn tensorrt(model: &str, a: &Accelerator, cache_dir: &Path) -> Result<Accel> {
    let mut opts = Vec::new();
    let mut keys: Vec<&String> = a.parameters.keys().collect();
    keys.sort();
    for key in keys {
        let v = &a.parameters[key];
        if key == "precision_mode" {
            match v.trim().to_ascii_uppercase().as_str() {
                "FP32" => {}
                "FP16" => opts.push(("trt_fp16_enable".to_string(), "1".to_string())),
                "INT8" => opts.push(("trt_int8_enable".to_string(), "1".to_string())),
                _ => {
                    return Err(Error::invalid(format!(
                        "model '{model}': execution accelerator 'tensorrt' parameter 'precision_mode' must be FP32, \
                         FP16 or INT8, got '{v}'"
                    )))
                }
            }
            continue;
        }
        let Some((_, ort_key, kind)) = TENSORRT.iter().find(|(k, _, _)| k == key) else {
            let known: Vec<&str> =
                std::iter::once("precision_mode").chain(TENSORRT.iter().map(|(k, _, _)| *k)).collect();
            return Err(Error::invalid(format!(
                "model '{model}': execution accelerator 'tensorrt' has no parameter '{key}' (known: {})",
                known.join(", ")
            )));
        };
        opts.push((ort_key.to_string(), value(model, "tensorrt", key, v, kind)?));
    }
    // Engines are built at load, which takes minutes on a Jetson: unless the model says otherwise, they
    // are cached and reused across restarts.
    if !opts.iter().any(|(k, _)| k == "trt_engine_cache_enable") {
        opts.push(("trt_engine_cache_enable".into(), "1".into()));
    }
    if !opts.iter().any(|(k, _)| k == "trt_engine_cache_path") {
        opts.push(("trt_engine_cache_path".into(), cache_dir.to_string_lossy().into_owned()));
    }
    Ok(Accel::TensorRt(opts))
}

fn cuda(model: &str, a: &Accelerator) -> Result<Accel> {
    let mut opts = Vec::new();
    let mut keys: Vec<&String> = a.parameters.keys().collect();
    keys.sort();
    for key in keys {
        let Some((_, kind)) = CUDA.iter().find(|(k, _)| k == key) else {
            let known: Vec<&str> = CUDA.iter().map(|(k, _)| *k).collect();
            return Err(Error::invalid(format!(
                "model '{model}': execution accelerator 'cuda' has no parameter '{key}' (known: {})",
                known.join(", ")
            )));
        };
        opts.push((key.clone(), value(model, "cuda", key, &a.parameters[key], kind)?));
    }
    Ok(Accel::Cuda(opts))
}

/// The CUDA execution provider's options of a KIND_GPU instance: the `cuda` accelerator's, then the
/// CUDA `parameters` of the model (`gpu_mem_limit`...), which win as in Triton's backend.
pub fn cuda_options(plan: &Plan, params: &[(String, String)]) -> Vec<(String, String)> {
    let mut opts: Vec<(String, String)> = Vec::new();
    let accel = plan.gpu.iter().filter_map(|a| if let Accel::Cuda(o) = a { Some(o) } else { None }).flatten();
    for (k, v) in accel.chain(params) {
        opts.retain(|(have, _)| have != k);
        opts.push((k.clone(), v.clone()));
    }
    opts
}

fn openvino(model: &str, a: &Accelerator) -> Result<Accel> {
    let mut opts = Vec::new();
    let mut keys: Vec<&String> = a.parameters.keys().collect();
    keys.sort();
    for key in keys {
        let Some((_, kind)) = OPENVINO.iter().find(|(k, _)| k == key) else {
            let known: Vec<&str> = OPENVINO.iter().map(|(k, _)| *k).collect();
            return Err(Error::invalid(format!(
                "model '{model}': execution accelerator 'openvino' has no parameter '{key}' (known: {})",
                known.join(", ")
            )));
        };
        opts.push((key.clone(), value(model, "openvino", key, &a.parameters[key], kind)?));
    }
    Ok(Accel::OpenVino(opts))
}

/// Reads a model's accelerators; `cache_dir` is where its TensorRT engines go by default.
pub fn plan(cfg: &ModelConfig, cache_dir: &Path) -> Result<Plan> {
    let Some(ea) = cfg.optimization.as_ref().and_then(|o| o.execution_accelerators.as_ref()) else {
        return Ok(Plan::default());
    };
    let model = cfg.name.as_str();
    let mut plan = Plan::default();
    for a in &ea.gpu_execution_accelerator {
        plan.gpu.push(match a.name.as_str() {
            "tensorrt" => tensorrt(model, a, cache_dir)?,
            "cuda" => cuda(model, a)?,
            other => {
                return Err(Error::invalid(format!(
                    "model '{model}': unknown GPU execution accelerator '{other}' (the ONNX Runtime backend knows \
                     'tensorrt' and 'cuda'; the CUDA execution provider is used for every KIND_GPU instance)"
                )))
            }
        });
    }
    for a in &ea.cpu_execution_accelerator {
        plan.cpu.push(match a.name.as_str() {
            "openvino" => openvino(model, a)?,
            other => {
                return Err(Error::invalid(format!(
                    "model '{model}': unknown CPU execution accelerator '{other}' (the ONNX Runtime backend knows \
                     'openvino')"
                )))
            }
        });
    }
    Ok(plan)
}

#[cfg(test)]
mod tests;
