//! The model's `parameters` as Triton's openvino backend reads them (its README), checked once per
//! model: OpenVINO properties for the device, the device itself, a custom-operation library, and
//! the batch and shape options. A bad value fails the load naming the parameter and what it accepts;
//! an unknown parameter is named in a warning, with the closest known name.

use crate::error::{Error, Result};
use crate::model_api::ModelContext;
use crate::proto::inference::model_instance_group::Kind;
use crate::proto::inference::ModelConfig;
use std::path::PathBuf;

/// Parameters applied to the OpenVINO property of the same name on the device.
const PROPERTIES: &[&str] =
    &["PERFORMANCE_HINT", "NUM_STREAMS", "INFERENCE_NUM_THREADS", "COMPILATION_NUM_THREADS", "HINT_BF16"];

/// Parameters that shape how the backend reads and runs the model.
const OPTIONS: &[&str] =
    &["TARGET_DEVICE", "CPU_EXTENSION_PATH", "SKIP_OV_DYNAMIC_BATCHSIZE", "ENABLE_BATCH_PADDING", "RESHAPE_IO_LAYERS"];

/// `device`: another name for `TARGET_DEVICE`.
const DEVICE_ALIAS: &str = "device";

/// Most threads or streams a model may ask OpenVINO for.
const MAX_THREADS: u32 = 1024;

/// OpenVINO's virtual devices, which run on the devices listed after their `:` (or any it finds).
const VIRTUAL_DEVICES: &[&str] = &["AUTO", "MULTI", "HETERO", "BATCH"];

/// What a model's parameters ask of the backend.
#[derive(Debug, Default)]
pub struct Settings {
    /// OpenVINO properties for the device, in the order they are set.
    pub properties: Vec<(&'static str, String)>,
    /// The OpenVINO device the model is compiled for (`CPU` unless `TARGET_DEVICE` says otherwise).
    pub device: String,
    /// `CPU_EXTENSION_PATH`: a library of custom operations to load before the model is read.
    pub extension: Option<PathBuf>,
    /// `SKIP_OV_DYNAMIC_BATCHSIZE: YES`: the model's first dimension is left as it is.
    pub skip_dynamic_batch: bool,
    /// `ENABLE_BATCH_PADDING: YES`: a smaller batch is padded to the model's fixed batch.
    pub batch_padding: bool,
    /// `RESHAPE_IO_LAYERS: YES`: the inputs take the configuration's dims.
    pub reshape_io: bool,
}

fn yes_no(cfg: &ModelConfig, key: &str) -> Result<bool> {
    let Some(p) = cfg.parameters.get(key) else { return Ok(false) };
    match p.string_value.trim().to_ascii_uppercase().as_str() {
        "YES" | "TRUE" | "ON" => Ok(true),
        "NO" | "FALSE" | "OFF" | "" => Ok(false),
        other => Err(Error::invalid(format!(
            "model '{}': parameter '{key}' is '{other}', but it accepts YES or NO",
            cfg.name
        ))),
    }
}

impl Settings {
    /// Reads and checks the model's parameters; unknown ones are named in a warning.
    pub fn read(ctx: &ModelContext) -> Result<Settings> {
        let cfg = &ctx.config;
        let mut s = Settings {
            device: "CPU".into(),
            skip_dynamic_batch: yes_no(cfg, "SKIP_OV_DYNAMIC_BATCHSIZE")?,
            batch_padding: yes_no(cfg, "ENABLE_BATCH_PADDING")?,
            reshape_io: yes_no(cfg, "RESHAPE_IO_LAYERS")?,
            ..Default::default()
        };
        let mut keys: Vec<&String> = cfg.parameters.keys().collect();
        keys.sort();
        for key in keys {
            let value = cfg.parameters[key].string_value.trim();
            if let Some(&k) = PROPERTIES.iter().find(|p| **p == key.as_str()) {
                s.properties.extend(property(&ctx.name, k, value)?);
                continue;
            }
            match key.as_str() {
                "TARGET_DEVICE" | DEVICE_ALIAS => s.device = device_name(&ctx.name, key, value)?,
                "CPU_EXTENSION_PATH" => s.extension = Some(extension_path(ctx, value)?),
                k if super::formats::TENSORFLOW_PARAMETERS.iter().any(|(p, _)| *p == k) => {
                    super::formats::tensorflow_parameter(&ctx.name, k, value)
                }
                k if OPTIONS.contains(&k) => {}
                k => warn_unknown(&ctx.name, k),
            }
        }
        if let Some(streams) = default_streams(cfg, &s) {
            s.properties.push(("NUM_STREAMS", streams.to_string()));
        }
        Ok(s)
    }
}

/// The OpenVINO property for one of `PROPERTIES`, checked (`None`: nothing to set).
fn property(model: &str, key: &'static str, value: &str) -> Result<Option<(&'static str, String)>> {
    let bad = |accepted: &str| {
        Error::invalid(format!("model '{model}': parameter '{key}' is '{value}', but it accepts {accepted}"))
    };
    let upper = value.to_ascii_uppercase();
    Ok(Some(match key {
        "PERFORMANCE_HINT" => match upper.as_str() {
            "LATENCY" | "THROUGHPUT" | "CUMULATIVE_THROUGHPUT" => (key, upper),
            _ => return Err(bad("LATENCY, THROUGHPUT or CUMULATIVE_THROUGHPUT")),
        },
        "NUM_STREAMS" => match upper.as_str() {
            "AUTO" | "NUMA" => (key, upper),
            _ => match value.parse::<u32>() {
                Ok(n) if (1..=MAX_THREADS).contains(&n) => (key, n.to_string()),
                _ => return Err(bad(&format!("AUTO, NUMA or a number of streams from 1 to {MAX_THREADS}"))),
            },
        },
        "INFERENCE_NUM_THREADS" | "COMPILATION_NUM_THREADS" => match value.parse::<u32>() {
            Ok(n) if n <= MAX_THREADS => (key, n.to_string()),
            _ => return Err(bad(&format!("a number of threads from 0 (OpenVINO's choice) to {MAX_THREADS}"))),
        },
        "HINT_BF16" => match upper.as_str() {
            "YES" => ("INFERENCE_PRECISION_HINT", "bf16".into()),
            "NO" => return Ok(None),
            _ => return Err(bad("YES or NO")),
        },
        _ => return Ok(None),
    }))
}

/// `TARGET_DEVICE` as OpenVINO names devices (upper case; `GPU.1`, `AUTO:GPU,CPU` kept as written).
fn device_name(model: &str, key: &str, value: &str) -> Result<String> {
    let ok = !value.is_empty() && value.chars().all(|c| c.is_ascii_alphanumeric() || ".:,_-".contains(c));
    if !ok {
        return Err(Error::invalid(format!(
            "model '{model}': parameter '{key}' is '{value}', but it accepts an OpenVINO device such as CPU, GPU, \
             NPU or AUTO"
        )));
    }
    Ok(value.to_ascii_uppercase())
}

/// `CPU_EXTENSION_PATH`, which must exist: absolute, or relative to the model's folder.
fn extension_path(ctx: &ModelContext, value: &str) -> Result<PathBuf> {
    let path = PathBuf::from(value);
    let path = if path.is_absolute() { path } else { ctx.model_dir.join(path) };
    if !path.is_file() {
        return Err(Error::unavailable(format!(
            "model '{}': parameter 'CPU_EXTENSION_PATH' names '{}', which is not a file",
            ctx.name,
            path.display()
        )));
    }
    Ok(path)
}

fn warn_unknown(model: &str, key: &str) {
    let hint = crate::model_config::pbtxt::closest(key, PROPERTIES.iter().chain(OPTIONS).copied())
        .map(|c| format!(" (did you mean '{c}'?)"))
        .unwrap_or_default();
    tracing::warn!(
        "model '{model}': parameter '{key}' is not one the openvino backend reads{hint}; it is ignored. The backend \
         reads: {}, {}.",
        PROPERTIES.join(", "),
        OPTIONS.join(", ")
    );
}

/// The model's instances on the CPU (`count: N` over its groups); they share one compiled model.
pub fn cpu_instances(cfg: &ModelConfig) -> usize {
    cfg.instance_group
        .iter()
        .filter(|g| g.kind != Kind::Gpu as i32)
        .map(|g| usize::try_from(g.count.max(1)).unwrap_or(1))
        .sum::<usize>()
        .max(1)
}

/// With several instances on the CPU and neither `NUM_STREAMS` nor `PERFORMANCE_HINT` given, one
/// stream per instance: the instances share one compiled model, and OpenVINO splits the cores
/// between its streams, so N instances run side by side without oversubscribing a 2-4-core board
/// (its default on the CPU, one stream taking every core, would run them one after another).
fn default_streams(cfg: &ModelConfig, s: &Settings) -> Option<usize> {
    let chosen = s.properties.iter().any(|(k, _)| matches!(*k, "NUM_STREAMS" | "PERFORMANCE_HINT"));
    let n = cpu_instances(cfg);
    (s.device == "CPU" && !chosen && n > 1).then_some(n)
}

/// Checks that the machine has `device` (each device a virtual one names too), with OpenVINO's list.
pub fn check_device(device: &str, available: &[String]) -> Result<()> {
    let (base, members) = match device.split_once(':') {
        Some((b, m)) => (b, m.split(',').map(str::trim).filter(|m| !m.is_empty()).collect::<Vec<_>>()),
        None => (device, Vec::new()),
    };
    let has = |d: &str| available.iter().any(|a| a == d || a.strip_prefix(d).is_some_and(|rest| rest.starts_with('.')));
    let wanted: Vec<&str> = if VIRTUAL_DEVICES.contains(&base) { members } else { vec![device] };
    let missing: Vec<&str> = wanted.into_iter().filter(|d| !has(d)).collect();
    if missing.is_empty() && !available.is_empty() {
        return Ok(());
    }
    Err(Error::unavailable(format!(
        "the model asks for OpenVINO's {} device, which this machine does not have (OpenVINO finds: {})",
        if missing.is_empty() { device.to_string() } else { missing.join(", ") },
        if available.is_empty() { "no device".to_string() } else { available.join(", ") }
    )))
}

#[cfg(test)]
mod tests;
