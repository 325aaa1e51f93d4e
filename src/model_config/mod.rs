//! What a model's configuration and its folder say, read the same way by the repository (`core`) and
//! the backends: `config.pbtxt` to and from `ModelConfig` and JSON (`pbtxt`), what auto-complete reads
//! from model files (`autocomplete`), file names confined to their folders (`paths`), and where a
//! version's model file is. It imports neither `core` nor any backend.

pub mod autocomplete;
pub mod paths;
pub mod pbtxt;
pub mod support;

use crate::error::{Error, Result};
use crate::model_api::types::DataType;
use crate::proto::inference::model_config::SchedulingChoice;
use crate::proto::inference::ModelConfig;
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Numeric version folders of a model. Names that are not numbers, or that start with 0, are ignored.
pub fn list_versions(model_dir: &Path) -> BTreeSet<i64> {
    let Ok(entries) = std::fs::read_dir(model_dir) else {
        return BTreeSet::new();
    };
    entries
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter_map(|n| parse_version_dir(&n))
        .collect()
}

fn parse_version_dir(name: &str) -> Option<i64> {
    if name.is_empty() || name.starts_with('0') || !name.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    name.parse().ok()
}

/// Why a model's configuration could not be read: the configuration itself (`version` is `None`), or
/// the model file of one version, read to complete it (a broken `.onnx`, a `model.py` that fails).
/// Triton reports the latter against that version, in the index and in load errors.
#[derive(Debug, Clone)]
pub struct ConfigFailure {
    pub error: Error,
    /// The version whose model file failed.
    pub version: Option<i64>,
}

impl From<Error> for ConfigFailure {
    fn from(error: Error) -> Self {
        ConfigFailure { error, version: None }
    }
}

/// The model file of a version: `default_model_filename` (or the backend's default name) inside the
/// version folder, refused if it leads out of that folder (see [`paths::confined`]).
pub fn model_file(version_dir: &Path, cfg: &ModelConfig) -> Result<PathBuf> {
    paths::confined(version_dir, &model_filename(cfg), "default_model_filename")
        .map_err(|e| e.context(format!("model '{}'", cfg.name)))
}

/// A model configuration's `runtime` for a Python-based backend: the model is served by the Python
/// backend from `<backend-directory>/<backend>/model.py`, as tritonserver serves vLLM's.
pub const PYTHON_RUNTIME: &str = "model.py";

/// The model file name inside a version folder.
pub fn model_filename(cfg: &ModelConfig) -> String {
    if !cfg.default_model_filename.is_empty() {
        return cfg.default_model_filename.clone();
    }
    match cfg.backend.as_str() {
        "onnxruntime" => "model.onnx",
        "tensorrt" => "model.plan",
        "python" => "model.py",
        "pytorch" => "model.pt",
        "tensorflow" if cfg.platform == "tensorflow_graphdef" => "model.graphdef",
        "tensorflow" => "model.savedmodel",
        "openvino" => "model.xml",
        _ => "model",
    }
    .into()
}

/// The tensors the server feeds or reads itself for a sequence model, which are not in its `input` and
/// `output` lists. Backends and auto-complete use this to accept them in the model file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HiddenTensors {
    /// Control inputs and state inputs, with their datatypes.
    pub inputs: Vec<(String, DataType)>,
    /// State outputs, with their datatypes.
    pub outputs: Vec<(String, DataType)>,
}

impl HiddenTensors {
    /// Whether `name` is one of the hidden inputs.
    pub fn is_input(&self, name: &str) -> bool {
        self.inputs.iter().any(|(n, _)| n == name)
    }

    /// Whether `name` is one of the hidden outputs.
    pub fn is_output(&self, name: &str) -> bool {
        self.outputs.iter().any(|(n, _)| n == name)
    }
}

/// The control and implicit-state tensors of a sequence model, and the model inputs that `batch_input`
/// computes (they are in no `input` list either).
pub fn hidden_tensors(cfg: &ModelConfig) -> HiddenTensors {
    let mut inputs: Vec<(String, DataType)> = cfg
        .batch_input
        .iter()
        .filter_map(|b| DataType::from_config(b.data_type).map(|dt| (b, dt)))
        .flat_map(|(b, dt)| b.target_name.iter().map(move |t| (t.clone(), dt)))
        .collect();
    let Some(SchedulingChoice::SequenceBatching(s)) = &cfg.scheduling_choice else {
        return HiddenTensors { inputs, outputs: Vec::new() };
    };
    for ci in &s.control_input {
        for c in &ci.control {
            let dt = if !c.int32_false_true.is_empty() {
                Some(DataType::Int32)
            } else if !c.fp32_false_true.is_empty() {
                Some(DataType::Fp32)
            } else if !c.bool_false_true.is_empty() {
                Some(DataType::Bool)
            } else {
                DataType::from_config(c.data_type)
            };
            if let Some(dt) = dt {
                inputs.push((ci.name.clone(), dt));
            }
        }
    }
    let mut outputs = Vec::new();
    for st in &s.state {
        if let Some(dt) = DataType::from_config(st.data_type) {
            inputs.push((st.input_name.clone(), dt));
            outputs.push((st.output_name.clone(), dt));
        }
    }
    HiddenTensors { inputs, outputs }
}

/// Completes a configuration from what only the model's backend can read (a TensorRT engine, a Python
/// model's `auto_complete_config`). The repository asks the one registered for the model's backend.
pub trait Completer: Send + Sync {
    /// The configuration of model `name` in `dir`, completed.
    fn complete(&self, dir: &Path, name: &str, cfg: ModelConfig) -> std::result::Result<ModelConfig, ConfigFailure>;

    /// Fills in what the installed backends decide about the model in `dir`, with or without
    /// auto-complete: a Python-based backend's models get `runtime: "model.py"`.
    fn resolve(&self, _dir: &Path, _cfg: &mut ModelConfig) -> Result<()> {
        Ok(())
    }
}

/// Completers by backend name.
#[derive(Clone, Default)]
pub struct Completers(HashMap<&'static str, Arc<dyn Completer>>, Option<Arc<dyn Completer>>);

impl Completers {
    pub fn insert(&mut self, backend: &'static str, completer: Arc<dyn Completer>) {
        self.0.insert(backend, completer);
    }

    /// The completer of every backend not registered by name (it decides which it completes).
    pub fn set_fallback(&mut self, completer: Arc<dyn Completer>) {
        self.1 = Some(completer);
    }

    pub fn get(&self, backend: &str) -> Option<&Arc<dyn Completer>> {
        self.0.get(backend).or(self.1.as_ref())
    }
}

impl std::fmt::Debug for Completers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut names: Vec<&str> = self.0.keys().copied().collect();
        names.sort_unstable();
        f.debug_tuple("Completers").field(&names).finish()
    }
}
