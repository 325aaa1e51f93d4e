//! The backends of this build: ONNX Runtime, OpenVINO (which also serves TensorFlow models), Python and
//! TensorRT, each written against the interface in `model_api`, and the registry that holds them by
//! name. Nothing here imports `core`.

pub mod agents;
pub mod capi;
pub mod libsearch;
pub mod onnx;
pub mod openvino;
pub mod python;
pub mod python_based;
pub mod tensorrt;

use crate::error::Result;
use crate::memory::pool::Pools;
use crate::model_api::{Backend, BackendConfig, BackendRegistry, ServerApi};
use crate::model_config::{Completer, Completers};
use std::sync::Arc;

/// One built-in backend: its name, how it is made, and what completes its models' configurations
/// (`None`: its models' configurations are complete without its help).
struct Builtin {
    name: &'static str,
    make: MakeBackend,
    completer: MakeCompleter,
}

/// Makes a built-in backend from its settings, the server (for BLS) and the memory pools.
type MakeBackend = fn(&BackendConfig, Option<Arc<dyn ServerApi>>, Option<Pools>) -> Arc<dyn Backend>;

/// Makes what completes a built-in backend's model configurations, if anything does.
type MakeCompleter = fn(&BackendConfig) -> Result<Option<Arc<dyn Completer>>>;

/// The backends built into tritonrs, each named once.
fn builtins() -> [Builtin; 5] {
    [
        Builtin {
            name: "tensorrt",
            make: |config, _, pools| {
                let trt = Arc::new(tensorrt::TensorRtBackend::new(config, pools));
                tensorrt::register(&trt);
                trt
            },
            // What only TensorRT can complete a configuration from: its engine.
            completer: |_| Ok(Some(Arc::new(tensorrt::Completer))),
        },
        Builtin {
            name: "onnxruntime",
            make: |config, _, _| Arc::new(onnx::OnnxBackend::new(config)),
            completer: |_| Ok(None),
        },
        Builtin {
            name: openvino::NAME,
            make: |config, _, _| Arc::new(openvino::OpenVinoBackend::new(config)),
            // Inputs, outputs and max_batch_size from the model, which only OpenVINO can read.
            completer: |config| Ok(Some(Arc::new(openvino::Completer::new(config)))),
        },
        Builtin {
            // TensorFlow GraphDef and SavedModel models, read by OpenVINO's TensorFlow frontend.
            name: openvino::formats::TENSORFLOW,
            make: |config, _, _| Arc::new(openvino::formats::TensorFlowBackend::new(config)),
            completer: |config| Ok(Some(Arc::new(openvino::formats::tensorflow_completer(config)))),
        },
        Builtin {
            name: "python",
            make: |config, api, _| Arc::new(python::PythonBackend::new(config, api)),
            // A Python model's `auto_complete_config`.
            completer: |config| Ok(Some(Arc::new(python::Completer(python::Settings::from_config(config)?)))),
        },
    ]
}

/// The built-in backends `--backend-config=<name>,use-shared-library=true` does not leave to
/// `libtriton_<name>.so`.
fn enabled(config: &BackendConfig) -> impl Iterator<Item = Builtin> + '_ {
    builtins().into_iter().filter(|b| !use_shared_library(config, b.name))
}

/// The backends of this build, registered by name: what the server is assembled with (`assemble`).
/// `api` lets them call back into the server (BLS), when there is one.
pub fn builtin(config: &BackendConfig, api: Option<Arc<dyn ServerApi>>, pools: Option<Pools>) -> BackendRegistry {
    let mut registry = BackendRegistry::default();
    let mut python = None;
    for b in enabled(config) {
        let backend = (b.make)(config, api.clone(), pools.clone());
        if b.name == "python" {
            python = Some(backend.clone());
        }
        registry.insert(backend);
    }
    // Any other backend name is a Python-based backend (its `model.py` on the Python backend) or a
    // Triton backend library, hosted through its C API.
    let libraries = Arc::new(capi::CApiBackend::new(config, api));
    registry.set_fallback(Arc::new(python_based::Router { python, libraries }));
    registry
}

/// The repository agents: built-in ones and Triton agent libraries in `--repoagent-directory`.
pub fn agents(config: &BackendConfig, agent_settings: &BackendConfig) -> crate::model_api::agents::Agents {
    let dir =
        config.global.get("repoagent-directory").map(String::as_str).unwrap_or(agents::DEFAULT_REPOAGENT_DIRECTORY);
    crate::model_api::agents::Agents(Some(Arc::new(agents::AgentRegistry::with_builtin(dir.into(), agent_settings))))
}

/// Where tritonserver looks for response-cache libraries (`--cache-directory`'s default).
pub const DEFAULT_CACHE_DIRECTORY: &str = "/opt/tritonserver/caches";

/// Loads and initializes the TRITONCACHE library at `path` as cache `name` with its settings.
pub fn cache_library(
    path: &std::path::Path,
    name: &str,
    config_json: &str,
) -> Result<Arc<dyn crate::core::cache::ExternalCache>> {
    Ok(Arc::new(capi::CCache::load(path, name, config_json)?))
}

/// What only these backends can complete a configuration from, by backend name: a TensorRT engine, a
/// Python model's `auto_complete_config`.
pub fn completers(config: &BackendConfig) -> Result<Completers> {
    let mut c = Completers::default();
    let mut names = Vec::new();
    let mut python = None;
    for b in enabled(config) {
        if let Some(completer) = (b.completer)(config)? {
            if b.name == "python" {
                python = Some(completer.clone());
            }
            c.insert(b.name, completer);
        }
        names.push(b.name);
    }
    // Every other backend is a Python-based backend, whose `model.py` completes its models'
    // configurations, or a library, which completes them itself.
    let libraries = Arc::new(capi::CCompleter::new(config, names.clone()));
    c.set_fallback(Arc::new(python_based::Resolver::new(config, names, python, libraries)));
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

/// Whether `bytes` shares memory with any of `regions`: a backend that hands its output memory to the
/// response must copy an output that lies in a request's input (a runtime may return an input as an
/// output), as that memory is not the response's to keep.
pub(crate) fn overlaps(bytes: &[u8], regions: &[&[u8]]) -> bool {
    let (start, end) = (bytes.as_ptr() as usize, bytes.as_ptr() as usize + bytes.len());
    !bytes.is_empty()
        && regions.iter().any(|r| {
            let (rs, re) = (r.as_ptr() as usize, r.as_ptr() as usize + r.len());
            start < re && rs < end
        })
}
