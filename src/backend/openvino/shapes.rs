//! The shapes a model's inputs take before it is compiled: a dynamic batch for models exported with
//! a fixed one (Triton's openvino backend does the same, unless `SKIP_OV_DYNAMIC_BATCHSIZE`), or the
//! configuration's dims (`RESHAPE_IO_LAYERS`); and the fixed batch a smaller one is padded to
//! (`ENABLE_BATCH_PADDING`).

use super::ffi::{Dim, Model, PortInfo};
use super::settings::Settings;
use crate::error::{Error, Result};
use crate::proto::inference::ModelConfig;

/// A dimension of any size, as OpenVINO's C API takes it.
const ANY: Dim = Dim { min: -1, max: -1 };

/// Reshapes the model's inputs as the settings say: the configuration's dims with
/// `RESHAPE_IO_LAYERS`, else a dynamic batch for a batching configuration.
pub fn prepare(model: &mut Model, cfg: &ModelConfig, settings: &Settings) -> Result<()> {
    if settings.reshape_io {
        return reshape_io(model, cfg);
    }
    if settings.skip_dynamic_batch {
        return Ok(());
    }
    dynamic_batch(model, cfg)
}

/// For a batching configuration (`max_batch_size > 0`), gives every input whose first dimension is
/// fixed (a model exported with batch 1) a dynamic first dimension from 1 to `max_batch_size`.
/// OpenVINO then propagates the batch through the graph; a model whose graph cannot take it fails
/// here with OpenVINO's reason.
fn dynamic_batch(model: &mut Model, cfg: &ModelConfig) -> Result<()> {
    if cfg.max_batch_size <= 0 {
        return Ok(());
    }
    let batch = Dim { min: 1, max: i64::from(cfg.max_batch_size) };
    let shapes: Vec<(String, Vec<Dim>)> = model
        .inputs()
        .map_err(Error::unavailable)?
        .into_iter()
        .filter_map(|p| {
            let dims = p.dims?;
            let first = *dims.first()?;
            first.is_fixed().then(|| (p.name, std::iter::once(batch).chain(dims[1..].iter().copied()).collect()))
        })
        .collect();
    if shapes.is_empty() {
        return Ok(());
    }
    model.reshape(&shapes).map_err(|e| {
        Error::unavailable(format!(
            "model '{}': OpenVINO cannot give the inputs a dynamic batch dimension up to max_batch_size {} (set \
             parameter SKIP_OV_DYNAMIC_BATCHSIZE to YES to keep the model's own): {e}",
            cfg.name, cfg.max_batch_size
        ))
    })
}

/// `RESHAPE_IO_LAYERS`: every input the configuration lists takes its dims (`-1`: any size), after a
/// batch dimension from 1 to `max_batch_size` for a batching configuration.
fn reshape_io(model: &mut Model, cfg: &ModelConfig) -> Result<()> {
    let batch = (cfg.max_batch_size > 0).then(|| Dim { min: 1, max: i64::from(cfg.max_batch_size) });
    let shapes: Vec<(String, Vec<Dim>)> = cfg
        .input
        .iter()
        .map(|i| {
            let dims = i.dims.iter().map(|&d| if d < 0 { ANY } else { Dim { min: d, max: d } });
            (i.name.clone(), batch.into_iter().chain(dims).collect())
        })
        .collect();
    if shapes.is_empty() {
        return Ok(());
    }
    model.reshape(&shapes).map_err(|e| {
        Error::unavailable(format!(
            "model '{}': OpenVINO cannot give the inputs the configuration's dims (RESHAPE_IO_LAYERS): {e}",
            cfg.name
        ))
    })
}

/// The fixed first dimension every input has, if they all have the same one.
pub fn fixed_batch(inputs: &[PortInfo]) -> Option<i64> {
    let mut firsts = inputs.iter().map(|p| p.dims.as_ref().and_then(|d| d.first().copied()));
    let first = firsts.next()??;
    (first.is_fixed() && firsts.all(|d| d == Some(first))).then_some(first.min)
}

/// With `ENABLE_BATCH_PADDING`, the fixed batch every input has (requests with a smaller batch are
/// padded to it); `None` when padding is off, the configuration does not batch, or the inputs'
/// first dimensions are not all the same fixed size.
pub fn padded_batch(inputs: &[PortInfo], cfg: &ModelConfig, settings: &Settings) -> Option<i64> {
    if !settings.batch_padding || cfg.max_batch_size <= 0 {
        return None;
    }
    fixed_batch(inputs)
}
