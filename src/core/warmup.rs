//! Model warmup (`model_warmup`): sample requests run on every instance before the model is READY.
//! A failed warmup is a failed load, with the reason.

use crate::core::repository::{limits, WARMUP_FOLDER};
use crate::error::{Error, Result};
use crate::model_api::types::{element_count, serialize_bytes, DataType, Tensor};
use crate::model_api::{ExecRequest, ModelInstance};
use crate::model_config::paths;
use crate::proto::inference::model_warmup::input::InputDataType;
use crate::proto::inference::{ModelConfig, ModelWarmup};
use std::path::Path;

/// One warmup sample, built once and run `count` times on each instance.
pub struct Sample {
    pub name: String,
    pub exec: ExecRequest,
    /// `exec` as a batch of one (ragged inputs flattened, batch inputs added), for backends that take
    /// one merged execution, when the model has ragged inputs or batch inputs.
    pub batched: Option<ExecRequest>,
    pub count: u32,
}

/// Builds the configured samples. `model_dir` holds the `warmup/` folder for `input_data_file`; no input
/// may be larger than `max_bytes` (the sizes were checked with the configuration, see
/// [`limits::check`]; this bounds the allocations themselves).
pub fn samples(cfg: &ModelConfig, model_dir: &Path, max_bytes: usize) -> Result<Vec<Sample>> {
    cfg.model_warmup.iter().map(|w| sample(cfg, w, model_dir, max_bytes)).collect()
}

fn sample(cfg: &ModelConfig, w: &ModelWarmup, model_dir: &Path, max_bytes: usize) -> Result<Sample> {
    let fail = |msg: String| Error::invalid(format!("model warmup '{}': {msg}", w.name));
    let batching = cfg.max_batch_size > 0;
    if batching && (w.batch_size == 0 || w.batch_size as i32 > cfg.max_batch_size) {
        return Err(fail(format!(
            "batch_size {} must be between 1 and max_batch_size {}",
            w.batch_size, cfg.max_batch_size
        )));
    }
    let mut names: Vec<&String> = w.inputs.keys().collect();
    names.sort();
    let mut inputs = Vec::with_capacity(names.len());
    for name in names {
        let input = &w.inputs[name];
        let datatype = DataType::from_config(input.data_type)
            .ok_or_else(|| fail(format!("input '{name}' has no valid data_type")))?;
        let mut shape: Vec<i64> = if batching { vec![i64::from(w.batch_size)] } else { Vec::new() };
        shape.extend(input.dims.iter().copied());
        let count = element_count(&shape).ok_or_else(|| fail(format!("input '{name}' has invalid dims")))?;
        let data = match &input.input_data_type {
            Some(InputDataType::InputDataFile(file)) => {
                // As in Triton: the file holds one batch item, repeated for the whole batch.
                let path = paths::confined(&model_dir.join(WARMUP_FOLDER), file, "model_warmup.inputs.input_data_file")
                    .map_err(|e| fail(e.message))?;
                let copies = if batching { w.batch_size as usize } else { 1 };
                let limit = max_bytes / copies.max(1);
                let what = format!("input_data_file '{}'", paths::printable(file));
                let item = limits::read_file_bounded(&path, limit as u64, false, &what).map_err(|e| fail(e.message))?;
                let mut data = Vec::new();
                data.try_reserve_exact(item.len().saturating_mul(copies))
                    .map_err(|_| fail(format!("cannot allocate {copies} copies of {what}")))?;
                for _ in 0..copies {
                    data.extend_from_slice(&item);
                }
                data
            }
            Some(InputDataType::RandomData(true)) => filler(datatype, count, true, max_bytes).map_err(fail)?,
            _ => filler(datatype, count, false, max_bytes).map_err(fail)?,
        };
        inputs.push(Tensor::new(name.clone(), datatype, shape, data));
    }
    let outputs = cfg.output.iter().map(|o| o.name.clone()).collect();
    let exec = ExecRequest { inputs, outputs, ..Default::default() };
    let spec = crate::core::scheduler::batch::BatchSpec::from_config(cfg);
    let batched = if spec.is_plain() {
        None
    } else {
        Some(crate::core::scheduler::batch::merge(&[&exec], &spec).map_err(|e| fail(e.message))?)
    };
    Ok(Sample { name: w.name.clone(), exec, batched, count: w.count.max(1) })
}

/// Zeros, or deterministic pseudo-random values (a warmup needs plausible data, not entropy). BYTES
/// elements are empty strings for zero data and one-byte strings for random data. More than `max_bytes`
/// bytes, or an allocation that fails, is an error, never an abort.
fn filler(datatype: DataType, count: usize, random: bool, max_bytes: usize) -> std::result::Result<Vec<u8>, String> {
    let item: &[u8] = if random { b"a" } else { b"" };
    let size = datatype.byte_size().unwrap_or(4 + item.len());
    let len = count.checked_mul(size).filter(|&n| n <= max_bytes).ok_or_else(|| {
        format!("a sample of {count} elements of {} is over the limit of {max_bytes} bytes", datatype.as_str())
    })?;
    if datatype.byte_size().is_none() {
        return Ok(serialize_bytes(std::iter::repeat_n(item, count)).to_vec());
    }
    let mut out = limits::zeroed(len, "a warmup sample").map_err(|e| e.message)?;
    if random {
        // Plausible values: normal floats in [0, 1), small integers, valid bools (DataType::write_sample).
        let mut state = 0x2545_f491_u32;
        for chunk in out.chunks_mut(size) {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            datatype.write_sample(state, chunk);
        }
    }
    Ok(out)
}

/// Runs every sample on one instance.
pub fn run(instance: &mut dyn ModelInstance, samples: &[Sample], instance_name: &str) -> Result<()> {
    for s in samples {
        // As the scheduler runs it: merged for backends that take one execution, as sent for the others.
        let exec = s.batched.as_ref().filter(|_| !instance.takes_request_lists()).unwrap_or(&s.exec);
        for _ in 0..s.count {
            crate::core::scheduler::execute(instance, exec)
                .map_err(|e| e.context(format!("model warmup '{}' failed on instance '{instance_name}'", s.name)))?;
        }
    }
    Ok(())
}
