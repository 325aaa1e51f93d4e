//! The model formats besides OpenVINO IR that the openvino backend reads through OpenVINO's frontends,
//! as Triton lays them out: TensorFlow GraphDef (`model.graphdef`, `model.pb`) and SavedModel folders
//! (`model.savedmodel`, `model.saved_model`), TFLite, ONNX and PaddlePaddle files. OpenVINO picks the
//! frontend from the file's contents, so a GraphDef needs no `.pb` name.
//!
//! `backend: "tensorflow"` (and the `tensorflow_graphdef` / `tensorflow_savedmodel` platforms) is
//! served by this backend under the name `tensorflow` ([`TensorFlowBackend`]) unless
//! `--backend-config=tensorflow,use-shared-library=true` leaves it to NVIDIA's library.
//!
//! Tensor names: OpenVINO names a GraphDef's ports as TensorFlow names tensors (`x:0`) and a
//! SavedModel's by its signature's keys (`x`); Triton's TensorFlow backend names them `x`. A
//! configuration may use either form ([`config_name`]); auto-complete writes the plain one.

use super::{Completer, OpenVinoBackend};
use crate::error::{Error, Result};
use crate::model_api::{Backend, BackendConfig, InstanceSpec, ModelContext, ModelInstance};
use crate::proto::inference::ModelConfig;
use std::path::Path;

/// The name of Triton's TensorFlow backend, which this backend stands in for.
pub const TENSORFLOW: &str = "tensorflow";

/// TensorFlow models (`backend: "tensorflow"`), read by OpenVINO's TensorFlow frontend: an openvino
/// backend under another name.
pub struct TensorFlowBackend(OpenVinoBackend);

impl TensorFlowBackend {
    /// The same OpenVINO library as the openvino backend's, from its settings.
    pub fn new(config: &BackendConfig) -> Self {
        TensorFlowBackend(OpenVinoBackend::new(config))
    }
}

impl Backend for TensorFlowBackend {
    fn name(&self) -> &'static str {
        TENSORFLOW
    }

    fn check_instance(&self, ctx: &ModelContext, spec: &InstanceSpec) -> Result<()> {
        self.0.check_instance(ctx, spec)
    }

    fn create_instance(&self, ctx: &ModelContext, spec: &InstanceSpec) -> Result<Box<dyn ModelInstance>> {
        self.0.create_instance(ctx, spec)
    }
}

/// What completes a TensorFlow model's configuration: the openvino backend's completer, with
/// `default-max-batch-size` read from the tensorflow backend's settings first.
pub fn tensorflow_completer(config: &BackendConfig) -> Completer {
    let mut completer = Completer::new(config);
    if let Some(n) = config.get(TENSORFLOW, "default-max-batch-size").and_then(|v| v.trim().parse::<i32>().ok()) {
        completer.default_max_batch_size = n.max(0);
    }
    completer
}

/// Whether the model is a TensorFlow one, whose tensors auto-complete names without `:0`.
pub fn is_tensorflow(cfg: &ModelConfig) -> bool {
    let file = &cfg.default_model_filename;
    cfg.backend == TENSORFLOW
        || cfg.platform.starts_with("tensorflow_")
        || [".graphdef", ".pb", ".savedmodel", ".saved_model"].iter().any(|ext| file.ends_with(ext))
}

/// Checks that the model file exists: a file, or a SavedModel folder (one holding `saved_model.pb`,
/// which is what OpenVINO reads from a folder).
pub fn check_model_path(file: &Path) -> Result<()> {
    if file.is_dir() {
        if file.join("saved_model.pb").is_file() {
            return Ok(());
        }
        return Err(Error::unavailable(format!(
            "model folder '{}' holds no saved_model.pb: the openvino backend reads a folder as a TensorFlow \
             SavedModel",
            file.display()
        )));
    }
    if !file.is_file() {
        return Err(Error::unavailable(format!("model file '{}' not found", file.display())));
    }
    Ok(())
}

/// The parameters of Triton's TensorFlow backend that choose what to read from a SavedModel, with
/// the value OpenVINO's TensorFlow frontend reads without being told.
pub const TENSORFLOW_PARAMETERS: &[(&str, &str)] =
    &[("TF_GRAPH_TAG", "serve"), ("TF_SIGNATURE_DEF", "serving_default")];

/// A TensorFlow backend parameter (one of [`TENSORFLOW_PARAMETERS`]): OpenVINO picks the SavedModel's
/// graph and signature itself (the `serve` tag, the `serving_default` or only signature) and cannot
/// be told another, so any other value is named in a warning and ignored.
pub fn tensorflow_parameter(model: &str, key: &str, value: &str) {
    let Some((_, default)) = TENSORFLOW_PARAMETERS.iter().find(|(k, _)| *k == key) else { return };
    if value.is_empty() || value == *default {
        return;
    }
    tracing::warn!(
        "model '{model}': parameter '{key}' is '{value}', but OpenVINO's TensorFlow \
         frontend reads the SavedModel's '{default}' (or its only one) and cannot be told another; the parameter \
         is ignored."
    );
}

/// Whether `asked` names the tensor OpenVINO calls `port`: the same name, or the same with or without
/// TensorFlow's output index `:0`.
pub fn names_port(asked: &str, port: &str) -> bool {
    asked == port || asked.strip_suffix(":0") == Some(port) || port.strip_suffix(":0") == Some(asked)
}

/// The name port `port` goes by in a configuration whose tensors are `listed`: the listed name that
/// means it, if any; else, for a TensorFlow model, the name without `:0` (as Triton's TensorFlow
/// backend names tensors), else OpenVINO's name.
pub fn config_name(port: &str, listed: &[&str], tensorflow: bool) -> String {
    if let Some(n) = listed.iter().find(|n| **n == port).or_else(|| listed.iter().find(|n| names_port(n, port))) {
        return (*n).to_string();
    }
    match port.strip_suffix(":0") {
        Some(plain) if tensorflow => plain.to_string(),
        _ => port.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_means_its_port_with_or_without_the_output_index() {
        assert!(names_port("x", "x:0") && names_port("x:0", "x:0") && names_port("y:0", "y"));
        // Only the first output of a node goes without its index.
        assert!(!names_port("z", "z:1") && !names_port("x:1", "x:0"));
        // An exact name wins over another port it would also mean.
        assert_eq!(config_name("a", &["a:0", "a"], true), "a");
        assert_eq!(config_name("a:0", &["a:0", "a"], true), "a:0");
    }

    #[test]
    fn configurations_keep_their_own_form_and_auto_complete_writes_the_plain_one() {
        assert_eq!(config_name("x:0", &["x:0"], true), "x:0");
        assert_eq!(config_name("x:0", &["x"], true), "x");
        assert_eq!(config_name("x:0", &[], true), "x");
        // Other formats keep OpenVINO's name (an ONNX tensor may be called `x:0`).
        assert_eq!(config_name("x:0", &[], false), "x:0");
        assert_eq!(config_name("z:1", &[], true), "z:1");
    }

    #[test]
    fn a_folder_without_saved_model_pb_is_refused_naming_what_is_missing() {
        let dir = tempfile::tempdir().unwrap();
        let e = check_model_path(dir.path()).unwrap_err();
        assert!(e.message.contains("saved_model.pb"), "{}", e.message);
        std::fs::write(dir.path().join("saved_model.pb"), b"").unwrap();
        assert!(check_model_path(dir.path()).is_ok());
        assert!(check_model_path(&dir.path().join("nope")).unwrap_err().message.contains("not found"));
    }
}
