//! Python-based backends, as tritonserver finds them: a model whose `backend` names no built-in backend
//! and no `libtriton_<name>.so` (in the version folder, the model folder or
//! `<backend-directory>/<name>/`) is served by `<backend-directory>/<name>/model.py` on the Python
//! backend, with the model's own configuration (vLLM's backend is one). Such a model's configuration
//! says `runtime: "model.py"`, as tritonserver reports it, and the backend's folder may hold a
//! `pb_exec_env_model.py.tar.gz` Python environment for its models. Everything else goes to the
//! backend libraries.

use crate::error::Result;
use crate::model_api::{Backend, BackendConfig, InstanceSpec, ModelContext, ModelInstance};
use crate::model_config::{Completer, ConfigFailure, PYTHON_RUNTIME};
use crate::proto::inference::{ModelConfig, ModelParameter};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A Python environment a Python-based backend's folder may hold for its models (tritonserver's name).
const EXECUTION_ENV: &str = "pb_exec_env_model.py.tar.gz";

/// Serves the models of backends that are not built in: Python-based backends' models on the Python
/// backend, the others through their libraries.
pub struct Router {
    /// The built-in Python backend (`None` when `--backend-config=python,use-shared-library=true`).
    pub python: Option<Arc<dyn Backend>>,
    /// Backend libraries (`libtriton_<name>.so`).
    pub libraries: Arc<dyn Backend>,
}

impl Router {
    /// The backend that serves the model of `ctx`.
    fn backend(&self, ctx: &ModelContext) -> Result<&Arc<dyn Backend>> {
        if ctx.config.runtime != PYTHON_RUNTIME {
            return Ok(&self.libraries);
        }
        self.python.as_ref().ok_or_else(|| {
            crate::error::Error::unavailable(format!(
                "model '{}': backend '{}' is a Python-based backend, which needs the built-in Python backend \
                 (not --backend-config=python,use-shared-library=true)",
                ctx.name, ctx.config.backend
            ))
        })
    }
}

impl Backend for Router {
    fn name(&self) -> &'static str {
        self.libraries.name()
    }

    fn check_instance(&self, ctx: &ModelContext, spec: &InstanceSpec) -> Result<()> {
        self.backend(ctx)?.check_instance(ctx, spec)
    }

    fn create_instance(&self, ctx: &ModelContext, spec: &InstanceSpec) -> Result<Box<dyn ModelInstance>> {
        self.backend(ctx)?.create_instance(ctx, spec)
    }
}

/// Completes the configurations of models of backends that are not built in: it tells Python-based
/// backends' models (`runtime: "model.py"`) from backend libraries' and has each completed by its own.
pub struct Resolver {
    /// `--backend-directory`.
    pub directory: PathBuf,
    /// Backend names tritonrs serves itself.
    pub builtin: Vec<&'static str>,
    /// The Python backend's completer (`None` when it is not built in).
    pub python: Option<Arc<dyn Completer>>,
    /// The backend libraries' completer.
    pub libraries: Arc<dyn Completer>,
}

impl Resolver {
    pub fn new(
        config: &BackendConfig,
        builtin: Vec<&'static str>,
        python: Option<Arc<dyn Completer>>,
        libraries: Arc<dyn Completer>,
    ) -> Resolver {
        let directory = config
            .global
            .get("backend-directory")
            .map_or_else(|| PathBuf::from(crate::model_api::DEFAULT_BACKEND_DIRECTORY), PathBuf::from);
        Resolver { directory, builtin, python, libraries }
    }

    /// Whether a `libtriton_<name>.so` for the model in `dir` is installed where tritonserver looks
    /// (any version folder, the model folder, the backend's folder).
    fn library_installed(&self, dir: &Path, name: &str) -> bool {
        let file = format!("libtriton_{name}.so");
        let versions = crate::model_config::list_versions(dir).into_iter().map(|v| dir.join(v.to_string()));
        versions.chain([dir.to_path_buf(), self.directory.join(name)]).any(|d| d.join(&file).is_file())
    }
}

impl Completer for Resolver {
    fn complete(&self, dir: &Path, name: &str, cfg: ModelConfig) -> std::result::Result<ModelConfig, ConfigFailure> {
        match &self.python {
            Some(python) if cfg.runtime == PYTHON_RUNTIME => python.complete(dir, name, cfg),
            _ => self.libraries.complete(dir, name, cfg),
        }
    }

    /// Marks the model of a Python-based backend: `runtime: "model.py"` when no backend library is
    /// installed for it and `<backend-directory>/<backend>/model.py` is there, with the backend
    /// folder's Python environment when it has one and the model names none.
    fn resolve(&self, dir: &Path, cfg: &mut ModelConfig) -> Result<()> {
        let name = cfg.backend.as_str();
        if name.is_empty() || self.builtin.contains(&name) || name.contains(['/', '\\', '\0']) || name.starts_with('.')
        {
            return Ok(());
        }
        let backend_dir = self.directory.join(name);
        if cfg.runtime.is_empty() && !self.library_installed(dir, name) && backend_dir.join(PYTHON_RUNTIME).is_file() {
            cfg.runtime = PYTHON_RUNTIME.to_string();
        }
        let env = backend_dir.join(EXECUTION_ENV);
        if cfg.runtime == PYTHON_RUNTIME && !cfg.parameters.contains_key("EXECUTION_ENV_PATH") && env.is_file() {
            let value = ModelParameter { string_value: env.display().to_string() };
            cfg.parameters.insert("EXECUTION_ENV_PATH".into(), value);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
