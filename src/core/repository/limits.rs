//! Bounds on the configuration values that size the server's own allocations.
//!
//! A load request's `config` (or a `config.pbtxt`) can ask for 2^31 instances or a warmup tensor of
//! 4 TiB; sized as asked, the allocation aborts the whole process. Every such value is checked here,
//! with checked arithmetic, before anything is allocated from it; a value over its limit makes the
//! model UNAVAILABLE with a reason naming the field and the limit (`tritonrs validate` reports it too).

use crate::error::{Error, Result};
use crate::model_api::types::DataType;
use crate::proto::inference::model_config::SchedulingChoice;
use crate::proto::inference::model_instance_group::Kind;
use crate::proto::inference::model_sequence_batching::StrategyChoice;
use crate::proto::inference::model_warmup::input::InputDataType;
use crate::proto::inference::{ModelConfig, ModelSequenceBatching};

/// Largest configuration accepted, as a load request's `config` text or a `config.pbtxt` file.
/// Triton's configurations are kilobytes; parsing costs about 20 times the text in memory.
pub const MAX_CONFIG_BYTES: usize = 1 << 20;
/// Most instances one model version may ask for, over all its instance groups (each is a thread and
/// a backend session).
pub const MAX_INSTANCES: u64 = 256;
/// Largest `max_batch_size` (and warmup `batch_size`).
pub const MAX_BATCH_SIZE: i32 = 1 << 16;
/// Most sequence slots (slots per instance times instances) a sequence batcher may hold.
pub const MAX_SEQUENCE_SLOTS: u64 = 1 << 16;
/// Most dynamic-batching priority levels.
pub const MAX_PRIORITY_LEVELS: u64 = 1 << 16;
/// Largest label file.
pub const MAX_LABEL_FILE_BYTES: u64 = 16 << 20;
/// Most labels (lines) in one label file: each costs a string, however short its line.
pub const MAX_LABELS: usize = 1 << 20;
/// Largest tensor the server builds from a configuration (warmup samples, initial and zero state) when
/// no other limit is given: the default of `--http-max-input-size` and `--grpc-max-message-size`.
pub const DEFAULT_MAX_TENSOR_BYTES: usize = 64 << 20;

/// Checks every value of `cfg` that sizes an allocation. `max_tensor_bytes` bounds each tensor built
/// from the configuration: a warmup sample or a state may be no larger than a request the server accepts.
pub fn check(cfg: &ModelConfig, max_tensor_bytes: usize) -> Result<()> {
    if cfg.max_batch_size > MAX_BATCH_SIZE {
        return Err(over(cfg, "max_batch_size".into(), format!("{}", cfg.max_batch_size), MAX_BATCH_SIZE.to_string()));
    }
    let instances = check_instances(cfg)?;
    check_dims(cfg)?;
    check_warmup(cfg, max_tensor_bytes)?;
    match &cfg.scheduling_choice {
        Some(SchedulingChoice::DynamicBatching(d)) if d.priority_levels > MAX_PRIORITY_LEVELS => Err(over(
            cfg,
            "dynamic_batching.priority_levels".into(),
            d.priority_levels.to_string(),
            MAX_PRIORITY_LEVELS.to_string(),
        )),
        Some(SchedulingChoice::SequenceBatching(s)) => {
            check_sequence_slots(cfg, s, instances)?;
            check_states(cfg, s, max_tensor_bytes)
        }
        _ => Ok(()),
    }
}

/// The error for a value of `cfg`'s `field` (`what`) over its `limit`.
fn over(cfg: &ModelConfig, field: String, what: String, limit: String) -> Error {
    Error::invalid(format!("model '{}': field '{field}': {what} is over the limit of {limit}", cfg.name))
}

/// The limit named for a tensor built from the configuration that is over `max_tensor_bytes`.
fn tensor_limit(max_tensor_bytes: usize) -> String {
    format!("{max_tensor_bytes} bytes (the largest request the server accepts; see --http-max-input-size and --grpc-max-message-size)")
}

/// Counts the instances `cfg` asks for (each group's count, times its GPUs for KIND_GPU; at least 1),
/// refusing more than [`MAX_INSTANCES`] in all.
fn check_instances(cfg: &ModelConfig) -> Result<u64> {
    let mut instances: u64 = 0;
    for (i, g) in cfg.instance_group.iter().enumerate() {
        let devices = if g.kind == Kind::Gpu as i32 { g.gpus.len().max(1) as u64 } else { 1 };
        let n = u64::try_from(g.count.max(1)).unwrap_or(1).saturating_mul(devices);
        instances = instances.saturating_add(n);
        if instances > MAX_INSTANCES {
            return Err(over(
                cfg,
                format!("instance_group[{i}].count"),
                format!("{instances} instances in all"),
                format!("{MAX_INSTANCES} instances per model"),
            ));
        }
    }
    Ok(instances.max(1))
}

/// Checks that the dimensions (and reshapes) of every input and output, times the batch, have an element
/// count that fits an `i64`, so no size computed from them can overflow.
fn check_dims(cfg: &ModelConfig) -> Result<()> {
    let batch = i64::from(cfg.max_batch_size.max(1));
    let tensors = cfg
        .input
        .iter()
        .enumerate()
        .map(|(i, t)| (format!("input[{i}]"), &t.dims, t.reshape.as_ref()))
        .chain(cfg.output.iter().enumerate().map(|(i, t)| (format!("output[{i}]"), &t.dims, t.reshape.as_ref())));
    for (field, dims, reshape) in tensors {
        if fixed_elements(dims, batch).is_none() {
            return Err(Error::invalid(format!(
                "model '{}': field '{field}.dims': {dims:?} has more elements than the server can address",
                cfg.name
            )));
        }
        if let Some(r) = reshape {
            if fixed_elements(&r.shape, batch).is_none() {
                return Err(Error::invalid(format!(
                    "model '{}': field '{field}.reshape.shape': {:?} has more elements than the server can address",
                    cfg.name, r.shape
                )));
            }
        }
    }
    Ok(())
}

/// Checks each warmup sample's batch size and, for zero and random data, its size: samples are built in
/// full before the model is READY.
fn check_warmup(cfg: &ModelConfig, max_tensor_bytes: usize) -> Result<()> {
    for (i, w) in cfg.model_warmup.iter().enumerate() {
        if w.batch_size > MAX_BATCH_SIZE as u32 {
            return Err(over(
                cfg,
                format!("model_warmup[{i}].batch_size"),
                w.batch_size.to_string(),
                MAX_BATCH_SIZE.to_string(),
            ));
        }
        let mut names: Vec<&String> = w.inputs.keys().collect();
        names.sort();
        for name in names {
            let input = &w.inputs[name];
            let field = format!("model_warmup[{i}].inputs[\"{name}\"].dims");
            let Some(dt) = DataType::from_config(input.data_type) else { continue };
            // Files hold their own size, checked when they are read; zero and random data is sized here.
            if matches!(input.input_data_type, Some(InputDataType::InputDataFile(_))) {
                continue;
            }
            let batch = if cfg.max_batch_size > 0 { u64::from(w.batch_size.max(1)) } else { 1 };
            let bytes = tensor_bytes(&input.dims, dt).and_then(|b| b.checked_mul(batch));
            if bytes.is_none_or(|b| b > max_tensor_bytes as u64) {
                let what = match bytes {
                    Some(b) => format!("a sample of {b} bytes ({:?} x batch {batch})", input.dims),
                    None => format!("a sample of {:?} x batch {batch}", input.dims),
                };
                return Err(over(cfg, field, what, tensor_limit(max_tensor_bytes)));
            }
        }
    }
    Ok(())
}

/// Checks the sequence slots a sequence batcher holds (slots per instance times `instances`) against
/// [`MAX_SEQUENCE_SLOTS`], naming the field that sets the slots per instance.
fn check_sequence_slots(cfg: &ModelConfig, s: &ModelSequenceBatching, instances: u64) -> Result<()> {
    let oldest = match &s.strategy_choice {
        Some(StrategyChoice::Oldest(o)) if o.max_candidate_sequences > 0 => Some(o.max_candidate_sequences),
        _ => None,
    };
    let per_instance = match oldest {
        Some(candidates) => u64::try_from(candidates).unwrap_or(u64::MAX),
        None => u64::try_from(cfg.max_batch_size.max(1)).unwrap_or(1),
    };
    let slots = per_instance.saturating_mul(instances);
    if slots > MAX_SEQUENCE_SLOTS {
        let field =
            if oldest.is_some() { "sequence_batching.oldest.max_candidate_sequences" } else { "max_batch_size" };
        return Err(over(
            cfg,
            field.into(),
            format!("{slots} sequence slots ({per_instance} per instance x {instances} instances)"),
            format!("{MAX_SEQUENCE_SLOTS} slots"),
        ));
    }
    Ok(())
}

/// Checks the size of each sequence state (times the batch) and of each of its initial states.
fn check_states(cfg: &ModelConfig, s: &ModelSequenceBatching, max_tensor_bytes: usize) -> Result<()> {
    let batch = i64::from(cfg.max_batch_size.max(1));
    for (i, st) in s.state.iter().enumerate() {
        let Some(dt) = DataType::from_config(st.data_type) else { continue };
        let sized = |dims: &[i64]| tensor_bytes(&dims.iter().map(|&d| d.max(1)).collect::<Vec<_>>(), dt);
        let state = sized(&st.dims).map(|b| b.saturating_mul(batch as u64));
        if state.is_none_or(|b| b > max_tensor_bytes as u64) {
            return Err(over(
                cfg,
                format!("sequence_batching.state[{i}].dims"),
                format!("a state of {:?} (x batch {batch})", st.dims),
                tensor_limit(max_tensor_bytes),
            ));
        }
        for (j, init) in st.initial_state.iter().enumerate() {
            if sized(&init.dims).is_none_or(|b| b > max_tensor_bytes as u64) {
                return Err(over(
                    cfg,
                    format!("sequence_batching.state[{i}].initial_state[{j}].dims"),
                    format!("an initial state of {:?}", init.dims),
                    tensor_limit(max_tensor_bytes),
                ));
            }
        }
    }
    Ok(())
}

/// The number of elements of `dims` times `batch`, counting a variable dimension (-1) as 1; `None`
/// when that does not fit in an `i64`.
fn fixed_elements(dims: &[i64], batch: i64) -> Option<i64> {
    dims.iter().try_fold(batch, |acc, &d| acc.checked_mul(d.max(1)))
}

/// Bytes of a tensor of `dims` (every dimension at least 0) and `dt`; a BYTES element is counted as its
/// 4-byte length prefix plus one byte, as warmup builds them. `None` on a negative dimension or overflow.
pub fn tensor_bytes(dims: &[i64], dt: DataType) -> Option<u64> {
    let elements = dims.iter().try_fold(1u64, |acc, &d| u64::try_from(d).ok().and_then(|d| acc.checked_mul(d)))?;
    elements.checked_mul(dt.byte_size().unwrap_or(5) as u64)
}

/// Reads a file named by a configuration, never more than `limit` bytes of it: a longer file is refused
/// (before it is read, where its size is known), or cut to `limit` bytes when `prefix_ok`.
pub fn read_file_bounded(path: &std::path::Path, limit: u64, prefix_ok: bool, what: &str) -> Result<Vec<u8>> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|e| Error::invalid(format!("cannot read {what}: {e}")))?;
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    if len > limit && !prefix_ok {
        return Err(Error::invalid(format!("{what} is {len} bytes, over the limit of {limit} bytes")));
    }
    let mut out = Vec::new();
    out.try_reserve_exact(len.min(limit) as usize)
        .map_err(|_| Error::unavailable(format!("cannot allocate {} bytes to read {what}", len.min(limit))))?;
    // `take` also bounds a file that grows while it is read.
    file.take(limit.saturating_add(1))
        .read_to_end(&mut out)
        .map_err(|e| Error::invalid(format!("cannot read {what}: {e}")))?;
    if out.len() as u64 > limit {
        if !prefix_ok {
            return Err(Error::invalid(format!("{what} is over the limit of {limit} bytes")));
        }
        out.truncate(limit as usize);
    }
    Ok(out)
}

/// A zero-filled buffer of `len` bytes, or an error instead of an abort when it cannot be allocated.
pub fn zeroed(len: usize, what: &str) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    out.try_reserve_exact(len).map_err(|_| Error::unavailable(format!("cannot allocate {len} bytes for {what}")))?;
    out.resize(len, 0);
    Ok(out)
}

#[cfg(test)]
mod tests;
