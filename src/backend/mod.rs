//! The backends of this build: ONNX Runtime, Python and TensorRT, each written against the interface
//! in `model_api`, and the registry that holds them by name. Nothing here imports `core`.

pub mod onnx;
pub mod python;
pub mod tensorrt;

use crate::error::{Error, Result};
use crate::model_api::{Backend, BackendConfig, ServerApi};
use std::collections::HashMap;
use std::sync::Arc;

/// The backends this server can use, by name.
pub struct BackendRegistry {
    backends: HashMap<&'static str, Arc<dyn Backend>>,
}

impl BackendRegistry {
    /// The backends of this build; `api` lets them call back into the server (BLS), when there is one.
    pub fn new(
        config: &BackendConfig,
        api: Option<Arc<dyn ServerApi>>,
        pools: Option<crate::memory::pool::Pools>,
    ) -> Self {
        let mut backends: HashMap<&'static str, Arc<dyn Backend>> = HashMap::new();
        let trt = Arc::new(tensorrt::TensorRtBackend::new(config, pools));
        tensorrt::register(&trt);
        backends.insert("tensorrt", trt);
        let ort: Arc<dyn Backend> = Arc::new(onnx::OnnxBackend::new(config));
        backends.insert(ort.name(), ort);
        let python: Arc<dyn Backend> = Arc::new(python::PythonBackend::new(config, api));
        backends.insert(python.name(), python);
        BackendRegistry { backends }
    }

    pub fn get(&self, name: &str) -> Result<Arc<dyn Backend>> {
        self.backends
            .get(name)
            .cloned()
            .ok_or_else(|| Error::unavailable(format!("backend '{name}' is not available in this build")))
    }
}
