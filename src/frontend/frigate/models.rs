//! Models for Frigate: loading the one it names, and writing one it pushes into the accept folder
//! (`<dir>/<stem>/1/model.onnx` with a generated `config.pbtxt`), switched in by renaming a complete
//! folder so the repository never shows half a model.

use crate::core::{ControlMode, Server};
use crate::error::{Error, Result};
use crate::model_api::LoadOptions;
use crate::model_config::autocomplete::{onnx_io_from_bytes, ModelIoInfo};
use crate::vision::spec::NMS_OUTPUTS;
use std::path::Path;

/// Whether `model` serves, loading it first if the control mode lets a load happen now: explicit mode
/// loads it, poll mode polls the repositories once; none mode only reports.
pub async fn ensure_loaded(server: &Server, model: &str) -> bool {
    if server.model_ready(model, "").await.unwrap_or(false) {
        return true;
    }
    match server.control_mode() {
        ControlMode::Explicit => {
            if let Err(e) = server.load_model(model, LoadOptions::default()).await {
                tracing::warn!("Frigate ZMQ detector: model '{model}' did not load: {}", e.message);
            }
        }
        ControlMode::Poll => server.poll_once().await,
        ControlMode::None => {}
    }
    server.model_ready(model, "").await.unwrap_or(false)
}

/// A name a pushed model may have: a folder name with nothing to escape or hide.
fn valid_name(stem: &str) -> bool {
    !stem.is_empty()
        && stem.len() <= 200
        && !stem.starts_with('.')
        && stem.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// The output decoder of a detector, from its outputs: EfficientNMS_TRT's four names, four outputs
/// laid out as TensorFlow's SSD (boxes, classes, scores, count), or one YOLO-style output.
pub fn decoder(io: &ModelIoInfo) -> Result<String> {
    let names: Vec<&str> = io.outputs.iter().map(|o| o.name.as_str()).collect();
    if NMS_OUTPUTS.iter().all(|n| names.contains(n)) {
        return Ok("efficient_nms".into());
    }
    match io.outputs.len() {
        1 => Ok("yolo".into()),
        4 => Ok("ssd".into()),
        n => Err(Error::invalid(format!(
            "its {n} outputs ({}) fit no detection decoder: one YOLO output, EfficientNMS_TRT's four, or SSD's \
             boxes, classes, scores and count",
            names.join(", ")
        ))),
    }
}

/// The configuration written beside a pushed model: ONNX Runtime, shapes auto-completed, the decoder.
pub fn config_text(stem: &str, decoder: &str) -> String {
    format!(
        "# Written by tritonrs for a model Frigate pushed over ZMQ.\nname: \"{stem}\"\nbackend: \"onnxruntime\"\n\
         parameters {{ key: \"image.output\" value: {{ string_value: \"{decoder}\" }} }}\n"
    )
}

/// Checks a pushed model and writes it as `<dir>/<stem>/1/model.onnx` with its configuration.
pub fn save(dir: &Path, stem: &str, data: &[u8], max_bytes: usize) -> Result<()> {
    if !valid_name(stem) {
        return Err(Error::invalid(format!(
            "'{}' is not a model name tritonrs accepts from Frigate (letters, digits, '-', '_' and '.', at most 200)",
            stem.escape_debug()
        )));
    }
    if data.len() > max_bytes {
        return Err(Error::invalid(format!(
            "the model has {} bytes, more than --frigate-zmq-max-model-mb allows ({max_bytes})",
            data.len()
        )));
    }
    let io = onnx_io_from_bytes(data)?;
    if io.inputs.len() != 1 {
        return Err(Error::invalid(format!(
            "it has {} inputs; a Frigate detector has one image input",
            io.inputs.len()
        )));
    }
    let decoder = decoder(&io)?;
    let unique = format!("{}-{}", std::process::id(), fastrand::u64(..));
    let staging = dir.join(format!(".frigate-{stem}-{unique}"));
    let io_err = |what: &Path, e: std::io::Error| Error::internal(format!("cannot write '{}': {e}", what.display()));
    let write = || -> Result<()> {
        std::fs::create_dir_all(staging.join("1")).map_err(|e| io_err(&staging, e))?;
        let model = staging.join("1/model.onnx");
        std::fs::write(&model, data).map_err(|e| io_err(&model, e))?;
        let cfg = staging.join("config.pbtxt");
        std::fs::write(&cfg, config_text(stem, &decoder)).map_err(|e| io_err(&cfg, e))?;
        Ok(())
    };
    if let Err(e) = write() {
        let _ = std::fs::remove_dir_all(&staging);
        return Err(e);
    }
    // A model of that name already there (one that failed to load, say) is replaced whole.
    let target = dir.join(stem);
    let old = dir.join(format!(".frigate-old-{stem}-{unique}"));
    let had_old = std::fs::rename(&target, &old).is_ok();
    let moved = std::fs::rename(&staging, &target).map_err(|e| io_err(&target, e));
    if had_old {
        match &moved {
            Ok(()) => {
                let _ = std::fs::remove_dir_all(&old);
            }
            Err(_) => {
                let _ = std::fs::rename(&old, &target);
            }
        }
    }
    if moved.is_err() {
        let _ = std::fs::remove_dir_all(&staging);
    }
    moved
}

#[cfg(test)]
mod tests;
