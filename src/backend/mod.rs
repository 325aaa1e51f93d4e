//! The backends of this build: ONNX Runtime, Python and TensorRT, each written against the interface
//! in `model_api`, and the registry that holds them by name. Nothing here imports `core`.

pub mod agents;
pub mod capi;
pub mod onnx;
pub mod python;
pub mod tensorrt;

use crate::error::Result;
use crate::memory::pool::Pools;
use crate::model_api::{BackendConfig, BackendRegistry, ServerApi};
use crate::model_config::Completers;
use std::sync::Arc;

/// The backends of this build, registered by name: what the server is assembled with (`main.rs`).
/// `api` lets them call back into the server (BLS), when there is one.
pub fn builtin(config: &BackendConfig, api: Option<Arc<dyn ServerApi>>, pools: Option<Pools>) -> BackendRegistry {
    let mut registry = BackendRegistry::default();
    // `--backend-config=<name>,use-shared-library=true` leaves <name> to `libtriton_<name>.so`.
    if !use_shared_library(config, "tensorrt") {
        let trt = Arc::new(tensorrt::TensorRtBackend::new(config, pools));
        tensorrt::register(&trt);
        registry.insert(trt);
    }
    if !use_shared_library(config, "onnxruntime") {
        registry.insert(Arc::new(onnx::OnnxBackend::new(config)));
    }
    if !use_shared_library(config, "python") {
        registry.insert(Arc::new(python::PythonBackend::new(config, api.clone())));
    }
    // Any other backend name is a Triton backend library, hosted through its C API.
    registry.set_fallback(Arc::new(capi::CApiBackend::new(config, api)));
    registry
}

/// The repository agents: built-in ones (none yet) and Triton agent libraries in
/// `--repoagent-directory`.
pub fn agents(config: &BackendConfig, agent_settings: &BackendConfig) -> crate::model_api::agents::Agents {
    let dir =
        config.global.get("repoagent-directory").map(String::as_str).unwrap_or(agents::DEFAULT_REPOAGENT_DIRECTORY);
    crate::model_api::agents::Agents(Some(Arc::new(agents::AgentRegistry::with_builtin(dir.into(), agent_settings))))
}

/// What only these backends can complete a configuration from, by backend name: a TensorRT engine, a
/// Python model's `auto_complete_config`.
pub fn completers(config: &BackendConfig) -> Result<Completers> {
    let mut c = Completers::default();
    if !use_shared_library(config, "python") {
        c.insert("python", Arc::new(python::Completer(python::Settings::from_config(config)?)));
    }
    if !use_shared_library(config, "tensorrt") {
        c.insert("tensorrt", Arc::new(tensorrt::Completer));
    }
    // Every other backend is a library, which completes its models' configurations itself.
    let builtin =
        ["onnxruntime", "python", "tensorrt"].into_iter().filter(|b| !use_shared_library(config, b)).collect();
    c.set_fallback(Arc::new(capi::CCompleter::new(config, builtin)));
    Ok(c)
}

/// Whether `--backend-config=<name>,use-shared-library=true` asks for Triton's `libtriton_<name>.so`
/// instead of the backend built into tritonrs.
pub fn use_shared_library(config: &BackendConfig, name: &str) -> bool {
    config
        .per_backend
        .get(name)
        .and_then(|m| m.get("use-shared-library"))
        .is_some_and(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "true" | "1" | "yes" | "on"))
}
