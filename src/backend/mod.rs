//! The backends of this build: ONNX Runtime, Python and TensorRT, each written against the interface
//! in `model_api`, and the registry that holds them by name. Nothing here imports `core`.

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
    let trt = Arc::new(tensorrt::TensorRtBackend::new(config, pools));
    tensorrt::register(&trt);
    registry.insert(trt);
    registry.insert(Arc::new(onnx::OnnxBackend::new(config)));
    registry.insert(Arc::new(python::PythonBackend::new(config, api)));
    // Any other backend name is a Triton backend library, hosted through its C API.
    registry.set_fallback(Arc::new(capi::CApiBackend::new(config)));
    registry
}

/// What only these backends can complete a configuration from, by backend name: a TensorRT engine, a
/// Python model's `auto_complete_config`.
pub fn completers(config: &BackendConfig) -> Result<Completers> {
    let mut c = Completers::default();
    c.insert("python", Arc::new(python::Completer(python::Settings::from_config(config)?)));
    c.insert("tensorrt", Arc::new(tensorrt::Completer));
    Ok(c)
}
