//! Model warmup (`model_warmup`): sample requests run on every instance before the model is READY.
//! A failed warmup is a failed load, with the reason.

use crate::backend::{ExecRequest, ModelInstance};
use crate::core::types::{element_count, serialize_bytes, DataType, Tensor};
use crate::error::{Error, Result};
use crate::proto::inference::model_warmup::input::InputDataType;
use crate::proto::inference::{ModelConfig, ModelWarmup};
use std::path::Path;

/// One warmup sample, built once and run `count` times on each instance.
pub struct Sample {
    pub name: String,
    pub exec: ExecRequest,
    pub count: u32,
}

/// Builds the configured samples. `model_dir` holds the `warmup/` folder for `input_data_file`.
pub fn samples(cfg: &ModelConfig, model_dir: &Path) -> Result<Vec<Sample>> {
    cfg.model_warmup.iter().map(|w| sample(cfg, w, model_dir)).collect()
}

fn sample(cfg: &ModelConfig, w: &ModelWarmup, model_dir: &Path) -> Result<Sample> {
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
                let path = model_dir.join("warmup").join(file);
                let item = std::fs::read(&path)
                    .map_err(|e| fail(format!("cannot read input_data_file '{}': {e}", path.display())))?;
                let copies = if batching { w.batch_size as usize } else { 1 };
                item.repeat(copies)
            }
            Some(InputDataType::RandomData(true)) => filler(datatype, count, true),
            _ => filler(datatype, count, false),
        };
        inputs.push(Tensor::new(name.clone(), datatype, shape, data));
    }
    let outputs = cfg.output.iter().map(|o| o.name.clone()).collect();
    Ok(Sample {
        name: w.name.clone(),
        exec: ExecRequest { inputs, outputs, ..Default::default() },
        count: w.count.max(1),
    })
}

/// Zeros, or deterministic pseudo-random bytes (a warmup needs plausible data, not entropy). BYTES
/// elements are empty strings for zero data and one-byte strings for random data.
fn filler(datatype: DataType, count: usize, random: bool) -> Vec<u8> {
    match datatype.byte_size() {
        None => {
            let item: &[u8] = if random { b"a" } else { b"" };
            serialize_bytes(std::iter::repeat_n(item, count)).to_vec()
        }
        Some(size) if random => {
            // Small values (one significant byte per element) so floats stay finite and bools valid.
            let mut state = 0x2545_f491_u32;
            let mut out = vec![0u8; count * size];
            for chunk in out.chunks_mut(size) {
                state ^= state << 13;
                state ^= state >> 17;
                state ^= state << 5;
                chunk[0] = if datatype == DataType::Bool { (state & 1) as u8 } else { (state % 100) as u8 };
            }
            out
        }
        Some(size) => vec![0u8; count * size],
    }
}

/// Runs every sample on one instance.
pub fn run(instance: &mut dyn ModelInstance, samples: &[Sample], instance_name: &str) -> Result<()> {
    for s in samples {
        for _ in 0..s.count {
            crate::core::scheduler::execute(instance, &s.exec)
                .map_err(|e| e.context(format!("model warmup '{}' failed on instance '{instance_name}'", s.name)))?;
        }
    }
    Ok(())
}
