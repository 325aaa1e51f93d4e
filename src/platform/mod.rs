//! The machine the server runs on: CPU and memory readings for the metrics endpoint, GPU readings
//! (gpu.rs: NVML, and Jetson sysfs in jetson.rs), the CUDA driver (cuda.rs), and the systemd service
//! protocol (systemd.rs).

pub mod affinity;
pub mod cuda;
pub mod gpu;
pub mod gpu_limit;
pub mod info;
pub mod jetson;
pub mod systemd;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Ends the process at once with `code`, without running exit handlers or library destructors: for a
/// second shutdown signal, when instance threads may still be inside a backend library (ONNX Runtime's
/// static objects torn down by `exit` under a running session crash the process with SIGSEGV).
#[allow(unsafe_code)]
pub fn exit_now(code: i32) -> ! {
    // SAFETY: `_exit` takes a plain integer, touches no memory of ours and never returns; it is
    // async-signal-safe and skips atexit handlers and destructors by design, which is the point here.
    unsafe { libc::_exit(code) }
}

/// Gives the heap's free pages back to the system (glibc's `malloc_trim(0)`), so that memory a model
/// freed on unload stops counting in the process's resident and proportional set sizes; a no-op where
/// the C library is not glibc.
#[allow(unsafe_code)]
pub fn trim_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `malloc_trim` takes a plain integer (the padding to keep) and only walks the allocator's
    // own arenas under their locks; it frees no block in use and is safe to call from any thread.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// CPU utilization and memory, refreshed in the background every `--metrics-interval-ms`.
#[derive(Debug, Default)]
pub struct CpuMonitor {
    /// Utilization in [0, 1] as f64 bits.
    utilization: AtomicU64,
    total_bytes: AtomicU64,
    used_bytes: AtomicU64,
}

/// One reading of [`CpuMonitor`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CpuReading {
    pub utilization: f64,
    pub memory_total_bytes: u64,
    pub memory_used_bytes: u64,
}

impl CpuMonitor {
    /// Takes a first reading, then keeps refreshing on its own thread (sysinfo reads /proc; a plain
    /// thread keeps that off the async workers).
    pub fn start(interval: Duration) -> std::io::Result<Arc<CpuMonitor>> {
        let monitor = Arc::new(CpuMonitor::default());
        let mut sys = sysinfo::System::new();
        monitor.refresh(&mut sys);
        let m = monitor.clone();
        std::thread::Builder::new().name("cpu-metrics".into()).spawn(move || loop {
            std::thread::sleep(interval.max(sysinfo::MINIMUM_CPU_UPDATE_INTERVAL));
            m.refresh(&mut sys);
        })?;
        Ok(monitor)
    }

    fn refresh(&self, sys: &mut sysinfo::System) {
        sys.refresh_cpu_usage();
        sys.refresh_memory();
        let util = f64::from(sys.global_cpu_usage() / 100.0).clamp(0.0, 1.0);
        self.utilization.store(util.to_bits(), Ordering::Relaxed);
        self.total_bytes.store(sys.total_memory(), Ordering::Relaxed);
        self.used_bytes.store(sys.used_memory(), Ordering::Relaxed);
    }

    pub fn reading(&self) -> CpuReading {
        CpuReading {
            utilization: f64::from_bits(self.utilization.load(Ordering::Relaxed)),
            memory_total_bytes: self.total_bytes.load(Ordering::Relaxed),
            memory_used_bytes: self.used_bytes.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests;
