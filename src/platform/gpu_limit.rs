//! `--model-load-gpu-limit=<device>:<fraction>`: a load on a GPU whose used memory is above the
//! fraction of its total is refused, as in tritonserver. Memory is read from NVML on discrete GPUs and
//! from `/proc/meminfo` on a Jetson, whose GPU shares the system memory.

use super::jetson::Jetson;
use crate::error::{Error, Result};
use std::collections::BTreeMap;

/// The limit of each device, a fraction in [0, 1].
pub type GpuLimits = BTreeMap<i32, f64>;

/// Reads `--model-load-gpu-limit` values (`0:0.8`).
pub fn parse_gpu_limits(values: &[String]) -> Result<GpuLimits> {
    let mut out = GpuLimits::new();
    for v in values {
        let bad = || Error::invalid(format!("--model-load-gpu-limit '{v}': expected <device>:<fraction in [0, 1]>"));
        let (device, fraction) = v.split_once(':').ok_or_else(bad)?;
        let device: i32 = device.trim().parse().ok().filter(|d| *d >= 0).ok_or_else(bad)?;
        let fraction: f64 = fraction.trim().parse().ok().filter(|f: &f64| (0.0..=1.0).contains(f)).ok_or_else(bad)?;
        out.insert(device, fraction);
    }
    Ok(out)
}

/// Used and total bytes of a device's memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryReading {
    pub used: u64,
    pub total: u64,
}

/// Refuses a load on `device` when its memory (`reading`, `None` where it cannot be read) is used above
/// its limit. A device without a limit, or whose memory cannot be read, is not limited.
pub fn check(limits: &GpuLimits, device: i32, reading: Option<MemoryReading>) -> Result<()> {
    let (Some(&limit), Some(r)) = (limits.get(&device), reading) else {
        return Ok(());
    };
    if r.total == 0 {
        return Ok(());
    }
    let used = r.used as f64 / r.total as f64;
    if used > limit {
        return Err(Error::unavailable(format!(
            "GPU {device} has {:.1}% of its memory in use ({} of {} MiB), over the {:.1}% that \
             --model-load-gpu-limit allows for a load",
            used * 100.0,
            r.used >> 20,
            r.total >> 20,
            limit * 100.0
        )));
    }
    Ok(())
}

/// The memory of `device` now: NVML's, or on a Jetson the system memory the GPU shares.
pub fn read(device: i32) -> Option<MemoryReading> {
    if let Ok(nvml) = nvml_wrapper::Nvml::init() {
        let gpu = u32::try_from(device).ok().and_then(|d| nvml.device_by_index(d).ok());
        if let Some(m) = gpu.and_then(|g| g.memory_info().ok()) {
            return Some(MemoryReading { used: m.used, total: m.total });
        }
    }
    let root = Jetson::root_from_env();
    Jetson::detect(&root)?;
    meminfo(&std::fs::read_to_string(root.join("proc/meminfo")).ok()?)
}

/// Used (total less available) and total memory from `/proc/meminfo`'s text.
fn meminfo(text: &str) -> Option<MemoryReading> {
    let kb = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map(|v| v << 10)
    };
    let total = kb("MemTotal:")?;
    let available = kb("MemAvailable:")?;
    Some(MemoryReading { used: total.saturating_sub(available), total })
}

#[cfg(test)]
mod tests;
