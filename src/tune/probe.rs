//! Readings of the serving process and the board taken around each measurement: CPU time, resident
//! memory, and power (sampled in the background, since a power reading is a moment's): on a Jetson
//! the board's input rail, on a machine with NVIDIA GPUs their draw through NVML.

use super::results::PowerSource;
use crate::platform::jetson::Jetson;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// CPU seconds (user + system) this process and the processes it started (Python stubs) have used,
/// from `/proc/<pid>/stat`.
pub fn cpu_seconds() -> Option<f64> {
    let own = cpu_of("self")?;
    Some(own + descendants(std::process::id()).into_iter().filter_map(|p| cpu_of(&p.to_string())).sum::<f64>())
}

fn cpu_of(pid: &str) -> Option<f64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which is in parentheses and may hold spaces): utime is the 14th
    // field of the line, stime the 15th, in clock ticks.
    let rest = text.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / CLOCK_TICKS)
}

/// USER_HZ: 100 on every Linux architecture this runs on (the kernel's ABI, not CONFIG_HZ).
const CLOCK_TICKS: f64 = 100.0;

/// A `/proc/<pid>/...` file's `Key:   N kB` line, in kB.
fn kb_field(path: &str, key: &str) -> Option<f64> {
    let text = std::fs::read_to_string(path).ok()?;
    let line = text.lines().find(|l| l.starts_with(key))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// The parent of a process, from `/proc/<pid>/stat` (the field after the parenthesised name).
fn parent_of(pid: u32) -> Option<u32> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    text.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse().ok()
}

/// Every process descended from `root` (a Python model's stubs and their fork server among them).
fn descendants(root: u32) -> Vec<u32> {
    let all: Vec<(u32, u32)> = std::fs::read_dir("/proc")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
                .filter_map(|pid| Some((pid, parent_of(pid)?)))
                .collect()
        })
        .unwrap_or_default();
    let mut out = vec![root];
    let mut i = 0;
    while i < out.len() {
        let p = out[i];
        out.extend(all.iter().filter(|(_, parent)| *parent == p).map(|(pid, _)| *pid));
        i += 1;
    }
    out.remove(0);
    out
}

/// The memory the server holds in MB: this process's proportional set size plus that of every process
/// it started (a Python model's stubs live in their own processes), so pages the stubs share through
/// their fork server count once. The fork server itself is left out: it starts once per server, on the
/// first Python model's load, and is no variant's cost. Resident size where PSS cannot be read.
pub fn memory_mb() -> Option<f64> {
    let one = |pid: String| {
        kb_field(&format!("/proc/{pid}/smaps_rollup"), "Pss:")
            .or_else(|| kb_field(&format!("/proc/{pid}/status"), "VmRSS:"))
    };
    let own = one("self".into())?;
    let children: f64 = server_children().into_iter().filter_map(|pid| one(pid.to_string())).sum();
    Some((own + children) / 1024.0)
}

/// [`memory_mb`] once an unload has settled: the heap's free pages given back to the system and the
/// unloaded model's stubs gone (the number of processes this one started no longer falling, for 3 s at
/// most).
pub async fn settled_memory_mb() -> Option<f64> {
    let mut before = usize::MAX;
    for _ in 0..60 {
        let now = server_children().len();
        if now >= before {
            break;
        }
        before = now;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    crate::platform::trim_heap();
    memory_mb()
}

/// The processes this one started, less the stubs' fork server.
pub fn server_children() -> Vec<u32> {
    descendants(std::process::id()).into_iter().filter(|&pid| !is_fork_server(pid)).collect()
}

/// Whether `pid` is the Python stubs' fork server: a child of this process with `tritonrs_zygote.py`
/// on its command line (a stub it forks is its child and sets a command line of its own).
fn is_fork_server(pid: u32) -> bool {
    parent_of(pid) == Some(std::process::id())
        && std::fs::read(format!("/proc/{pid}/cmdline"))
            .is_ok_and(|c| c.split(|&b| b == 0).any(|arg| arg.ends_with(b"tritonrs_zygote.py")))
}

/// GPU memory used by this process and the ones it started, through NVML (loaded at run time; `None`
/// where there is no NVML, as on a Jetson or a machine without a GPU).
pub struct GpuMemoryProbe {
    nvml: nvml_wrapper::Nvml,
}

impl GpuMemoryProbe {
    pub fn start() -> Option<GpuMemoryProbe> {
        let nvml = nvml_wrapper::Nvml::init().ok()?;
        (nvml.device_count().ok()? > 0).then_some(GpuMemoryProbe { nvml })
    }

    /// MB in use by the server's processes over every GPU.
    pub fn read_mb(&self) -> Option<f64> {
        let mut ours = descendants(std::process::id());
        ours.push(std::process::id());
        let mut bytes = 0u64;
        for i in 0..self.nvml.device_count().ok()? {
            let Ok(d) = self.nvml.device_by_index(i) else { continue };
            for p in d.running_compute_processes().unwrap_or_default() {
                if let (true, nvml_wrapper::enums::device::UsedGpuMemory::Used(b)) =
                    (ours.contains(&p.pid), p.used_gpu_memory)
                {
                    bytes += b;
                }
            }
        }
        Some(bytes as f64 / (1024.0 * 1024.0))
    }
}

/// The board's input power from a Jetson reading's rails: the total input rail where the board has
/// one (`POM_5V_IN` on the Nano and Xavier, `VDD_IN` on the Orin), else the sum of the rails.
pub fn board_watts(rails: &[(String, f64)]) -> Option<f64> {
    if rails.is_empty() {
        return None;
    }
    let total = rails.iter().find(|(name, _)| {
        let n = name.to_ascii_uppercase();
        n == "VDD_IN" || n.ends_with("5V_IN") || n == "POM_5V_IN"
    });
    Some(match total {
        Some((_, w)) => *w,
        None => rails.iter().map(|(_, w)| w).sum(),
    })
}

/// Power in watts summed over every GPU that NVML sees and that reports its draw; `None` where none
/// does (a GPU without a power sensor, or no GPU).
fn gpu_watts(nvml: &nvml_wrapper::Nvml) -> Option<f64> {
    let mut milliwatts = None;
    for i in 0..nvml.device_count().ok()? {
        if let Ok(mw) = nvml.device_by_index(i).and_then(|d| d.power_usage()) {
            *milliwatts.get_or_insert(0u64) += u64::from(mw);
        }
    }
    milliwatts.map(|mw| mw as f64 / 1000.0)
}

/// Samples power every `interval` while a measurement runs; the mean is its power. On a Jetson it
/// is the board's (its input rail, CPU and GPU together); on a machine with NVIDIA GPUs, the GPUs'
/// draw through NVML (not the CPU's), as Model Analyzer's `gpu_power_usage`.
pub struct PowerProbe {
    samples: Arc<Mutex<Vec<f64>>>,
    stop: Arc<AtomicBool>,
    /// What the readings measure.
    pub source: PowerSource,
}

impl PowerProbe {
    /// Starts sampling the Jetson's rails (`TRITONRS_SYSFS_ROOT` points tests at a fixture tree),
    /// else the GPUs through NVML (loaded at run time); `None` where neither gives a reading.
    pub fn start(interval: Duration) -> Option<PowerProbe> {
        if let Some(jetson) = Jetson::detect(&Jetson::root_from_env()) {
            if board_watts(&jetson.read().rails).is_some() {
                return PowerProbe::sample(PowerSource::Board, interval, move || board_watts(&jetson.read().rails));
            }
        }
        let nvml = nvml_wrapper::Nvml::init().ok()?;
        gpu_watts(&nvml)?;
        PowerProbe::sample(PowerSource::Gpus, interval, move || gpu_watts(&nvml))
    }

    fn sample(
        source: PowerSource,
        interval: Duration,
        read: impl Fn() -> Option<f64> + Send + 'static,
    ) -> Option<PowerProbe> {
        let samples = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (s, st) = (samples.clone(), stop.clone());
        std::thread::Builder::new()
            .name("tune-power".into())
            .spawn(move || {
                while !st.load(Ordering::Relaxed) {
                    if let Some(w) = read() {
                        s.lock().push(w);
                    }
                    std::thread::sleep(interval);
                }
            })
            .ok()?;
        Some(PowerProbe { samples, stop, source })
    }

    /// The mean power since the last call, and starts a new period.
    pub fn take_mean(&self) -> Option<f64> {
        let v = std::mem::take(&mut *self.samples.lock());
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
    }
}

impl Drop for PowerProbe {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests;
