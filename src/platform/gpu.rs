//! GPU readings for the metrics endpoint, refreshed in the background every `--metrics-interval-ms`:
//! NVML on discrete GPUs (`nvml-wrapper`, which loads `libnvidia-ml.so.1` at run time), Jetson sysfs
//! on integrated ones (see `jetson.rs`). Neither is required: without them there are no GPU metrics.

use super::jetson::{Jetson, JetsonReading};
use parking_lot::Mutex;
use std::sync::Arc;
use std::time::Duration;

/// One discrete GPU as NVML reports it; a value the GPU does not support is `None`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NvmlReading {
    pub uuid: String,
    /// In [0, 1].
    pub utilization: Option<f64>,
    pub memory_total_bytes: Option<u64>,
    pub memory_used_bytes: Option<u64>,
    pub power_watts: Option<f64>,
    pub power_limit_watts: Option<f64>,
    /// Joules since the server started (NVML counts since the driver loaded).
    pub energy_joules: Option<f64>,
}

/// Everything the GPU metrics show.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GpuReadings {
    pub nvml: Vec<NvmlReading>,
    /// The Jetson's readings and the label its GPU gets (`gpu_uuid`).
    pub jetson: Option<(String, JetsonReading)>,
}

/// The latest readings, refreshed on their own thread (NVML calls and sysfs reads block).
#[derive(Debug, Default)]
pub struct GpuMonitor {
    latest: Mutex<GpuReadings>,
}

/// Readings of discrete GPUs: NVML, or a fake in tests.
pub trait NvmlSource: Send {
    fn read(&mut self) -> Vec<NvmlReading>;
}

/// NVML through nvml-wrapper.
struct Nvml {
    nvml: nvml_wrapper::Nvml,
    /// NVML's energy counter of each GPU at start, in mJ, to report energy since start as Triton does.
    energy_start: Vec<Option<u64>>,
}

impl NvmlSource for Nvml {
    fn read(&mut self) -> Vec<NvmlReading> {
        let n = &self.nvml;
        let mut out = Vec::new();
        for i in 0..n.device_count().unwrap_or(0) {
            let Ok(d) = n.device_by_index(i) else { continue };
            let Ok(uuid) = d.uuid() else { continue };
            let memory = d.memory_info().ok();
            let energy = d.total_energy_consumption().ok();
            let start = self.energy_start.get(i as usize).copied().flatten();
            out.push(NvmlReading {
                uuid,
                utilization: d.utilization_rates().ok().map(|u| f64::from(u.gpu) / 100.0),
                memory_total_bytes: memory.as_ref().map(|m| m.total),
                memory_used_bytes: memory.as_ref().map(|m| m.used),
                power_watts: d.power_usage().ok().map(|mw| f64::from(mw) / 1000.0),
                power_limit_watts: d.enforced_power_limit().ok().map(|mw| f64::from(mw) / 1000.0),
                energy_joules: energy.map(|e| e.saturating_sub(start.unwrap_or(e)) as f64 / 1000.0),
            });
        }
        out
    }
}

struct Sources {
    nvml: Option<Box<dyn NvmlSource>>,
    jetson: Option<(String, Jetson)>,
}

impl GpuMonitor {
    /// Finds the GPUs' sources; `None` when there is nothing to report (no NVML, not a Jetson).
    pub fn start(interval: Duration) -> std::io::Result<Option<Arc<GpuMonitor>>> {
        let nvml = match nvml_wrapper::Nvml::init() {
            Ok(n) if n.device_count().unwrap_or(0) > 0 => Some(n),
            Ok(_) => None,
            Err(e) => {
                tracing::debug!("No NVML GPU metrics: {e}");
                None
            }
        };
        let jetson = Jetson::detect(&Jetson::root_from_env()).map(|j| {
            // The CUDA driver's uuid when it answers, so the label matches other tools; else the SoC's GPU.
            let name = j.read().gpu.unwrap_or_else(|| "gpu".into());
            let uuid = crate::platform::cuda::driver()
                .ok()
                .and_then(|d| d.gpus.iter().find(|g| g.integrated).map(|g| g.uuid.clone()))
                .filter(|u| !u.is_empty())
                .unwrap_or_else(|| format!("jetson-{name}"));
            (uuid, j)
        });
        if nvml.is_none() && jetson.is_none() {
            return Ok(None);
        }
        let nvml = nvml.map(|n| {
            let energy_start = (0..n.device_count().unwrap_or(0))
                .map(|i| n.device_by_index(i).ok().and_then(|d| d.total_energy_consumption().ok()))
                .collect();
            Box::new(Nvml { nvml: n, energy_start }) as Box<dyn NvmlSource>
        });
        let mut sources = Sources { nvml, jetson };
        let monitor = Arc::new(GpuMonitor::default());
        *monitor.latest.lock() = sources.read();
        let m = monitor.clone();
        std::thread::Builder::new().name("gpu-metrics".into()).spawn(move || loop {
            std::thread::sleep(interval.max(Duration::from_millis(100)));
            let r = sources.read();
            *m.latest.lock() = r;
        })?;
        Ok(Some(monitor))
    }

    pub fn readings(&self) -> GpuReadings {
        self.latest.lock().clone()
    }
}

impl Sources {
    fn read(&mut self) -> GpuReadings {
        let mut out = GpuReadings::default();
        if let Some(n) = &mut self.nvml {
            out.nvml = n.read();
        }
        if let Some((uuid, j)) = &self.jetson {
            let mut reading = j.read();
            // Where NVML also reports the integrated GPU (JetPack 7, Thor), its utilization is NVML's:
            // a second `nv_gpu_utilization` series with the same uuid would make Prometheus reject
            // the whole scrape.
            if out.nvml.iter().any(|g| g.uuid == *uuid) {
                reading.gpu_load = None;
            }
            out.jetson = Some((uuid.clone(), reading));
        }
        out
    }
}

/// Renders the readings with Triton's `nv_gpu_*` names and our `tritonrs_jetson_*` ones.
pub fn render(out: &mut String, r: &GpuReadings) {
    use crate::metrics_text::names::*;
    use crate::metrics_text::sample;
    /// Each sample's labels and value.
    type Samples<'a> = Vec<(Vec<(&'static str, &'a str)>, f64)>;
    fn gpu(uuid: &str) -> Vec<(&'static str, &str)> {
        vec![("gpu_uuid", uuid)]
    }
    // A family without samples is left out.
    let mut family = |f: Family, samples: Samples| {
        if samples.is_empty() {
            return;
        }
        f.header(out);
        for (labels, v) in samples {
            sample(out, f.name, &labels, v);
        }
    };
    let nvml = |f: &dyn Fn(&NvmlReading) -> Option<f64>| -> Samples {
        r.nvml.iter().filter_map(|g| f(g).map(|v| (gpu(&g.uuid), v))).collect()
    };
    let mut utilization = nvml(&|g| g.utilization);
    if let Some((uuid, j)) = &r.jetson {
        if let Some(load) = j.gpu_load {
            utilization.push((gpu(uuid), load));
        }
    }
    family(GPU_UTILIZATION, utilization);
    family(GPU_MEMORY_TOTAL, nvml(&|g| g.memory_total_bytes.map(|v| v as f64)));
    family(GPU_MEMORY_USED, nvml(&|g| g.memory_used_bytes.map(|v| v as f64)));
    family(GPU_POWER_USAGE, nvml(&|g| g.power_watts));
    family(GPU_POWER_LIMIT, nvml(&|g| g.power_limit_watts));
    family(GPU_ENERGY, nvml(&|g| g.energy_joules));
    if let Some((uuid, j)) = &r.jetson {
        family(JETSON_GPU_FREQUENCY, j.gpu_frequency_hz.map(|f| (gpu(uuid), f as f64)).into_iter().collect());
        family(JETSON_TEMPERATURE, j.temperatures.iter().map(|(z, c)| (vec![("zone", z.as_str())], *c)).collect());
        family(JETSON_POWER, j.rails.iter().map(|(rail, w)| (vec![("rail", rail.as_str())], *w)).collect());
        let mode = j.power_mode.as_ref().map(|(id, name)| (id.to_string(), name));
        family(
            JETSON_NVPMODEL,
            mode.iter().map(|(id, name)| (vec![("id", id.as_str()), ("name", name.as_str())], 1.0)).collect(),
        );
    }
}

#[cfg(test)]
mod tests;
