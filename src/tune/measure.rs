//! One point of a sweep: `concurrency` requests kept in flight against a loaded variant, measured in
//! windows until three agree (perf_analyzer's stability rule: each window's throughput and average
//! latency within the stability percentage of the three windows' mean), or the trials run out.

use super::probe::{self, GpuMemoryProbe, PowerProbe};
use super::results::Point;
use super::target::{ServerTimes, Target};
use crate::model_api::types::InferRequest;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

#[derive(Debug, Clone)]
pub struct Settings {
    pub interval: Duration,
    pub stability_percent: f64,
    pub max_trials: u32,
    pub warmup_requests: u32,
}

/// The readings taken beside the requests: board power (Jetson) and GPU memory (NVML).
#[derive(Default)]
pub struct Probes {
    pub power: Option<PowerProbe>,
    pub gpu_memory: Option<GpuMemoryProbe>,
}

/// One measurement window.
#[derive(Debug, Clone, Default)]
struct Window {
    /// Latencies of the requests that completed in it, in microseconds.
    latencies_us: Vec<u64>,
    elapsed: Duration,
    times: ServerTimes,
    cpu_seconds: Option<f64>,
    power_w: Option<f64>,
}

impl Window {
    fn throughput(&self, batch: u32) -> f64 {
        self.latencies_us.len() as f64 * f64::from(batch) / self.elapsed.as_secs_f64().max(1e-9)
    }

    fn avg_us(&self) -> f64 {
        if self.latencies_us.is_empty() {
            return 0.0;
        }
        self.latencies_us.iter().sum::<u64>() as f64 / self.latencies_us.len() as f64
    }
}

/// Why a point has no result.
#[derive(Debug, Clone, PartialEq)]
pub enum Stop {
    /// Ctrl-C or the budget.
    Cancelled,
    /// A request failed: the variant is broken (the message is the server's).
    Failed(String),
}

/// Whether the last three windows agree within `percent` on throughput and average latency.
fn stable(windows: &[Window], batch: u32, percent: f64) -> bool {
    let Some(last) = windows.len().checked_sub(3).map(|i| &windows[i..]) else { return false };
    if last.iter().any(|w| w.latencies_us.is_empty()) {
        return false;
    }
    let agree = |values: [f64; 3]| {
        let mean = values.iter().sum::<f64>() / 3.0;
        mean > 0.0 && values.iter().all(|v| (v - mean).abs() <= mean * percent / 100.0)
    };
    agree([last[0].throughput(batch), last[1].throughput(batch), last[2].throughput(batch)])
        && agree([last[0].avg_us(), last[1].avg_us(), last[2].avg_us()])
}

fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1] as f64
}

/// Measures `model` at `concurrency`: `requests` are sent round-robin, each of batch `batch`.
#[allow(clippy::too_many_arguments)]
pub async fn point(
    target: &Target,
    model: &str,
    requests: Arc<Vec<InferRequest>>,
    batch: u32,
    concurrency: u32,
    settings: &Settings,
    probes: &Probes,
    cancel: &watch::Receiver<bool>,
) -> Result<Point, Stop> {
    let power = probes.power.as_ref();
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(Mutex::new(Vec::<u64>::with_capacity(4096)));
    let completed = Arc::new(AtomicU64::new(0));
    let failure: Arc<Mutex<Option<String>>> = Arc::new(Mutex::new(None));
    let mut workers = Vec::new();
    for w in 0..concurrency {
        let (target, requests, stop, done, completed, failure) =
            (target.clone(), requests.clone(), stop.clone(), done.clone(), completed.clone(), failure.clone());
        workers.push(tokio::spawn(async move {
            let mut i = w as usize;
            while !stop.load(Ordering::Relaxed) {
                let Some(req) = requests.get(i % requests.len().max(1)) else { break };
                i += concurrency as usize;
                let t0 = Instant::now();
                match target.infer(req.clone()).await {
                    Ok(()) => {
                        done.lock().push(t0.elapsed().as_micros() as u64);
                        completed.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => {
                        failure.lock().get_or_insert(e.message);
                        stop.store(true, Ordering::Relaxed);
                    }
                }
            }
        }));
    }
    let result = windows(target, model, batch, settings, power, cancel, &done, &completed, &failure).await;
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        let _ = w.await;
    }
    let windows = result?;
    let last = &windows[windows.len().saturating_sub(3)..];
    let mut all: Vec<u64> = last.iter().flat_map(|w| w.latencies_us.iter().copied()).collect();
    all.sort_unstable();
    let elapsed: f64 = last.iter().map(|w| w.elapsed.as_secs_f64()).sum();
    let first_times = &windows[windows.len().saturating_sub(4)].times;
    let (queue_ms, compute_input_ms, compute_infer_ms, compute_output_ms) =
        last[last.len() - 1].times.mean_ms_since(first_times);
    let cpu = match (windows[windows.len().saturating_sub(4)].cpu_seconds, last[last.len() - 1].cpu_seconds) {
        (Some(a), Some(b)) if elapsed > 0.0 => (b - a) / elapsed * 100.0,
        _ => 0.0,
    };
    let powers: Vec<f64> = last.iter().filter_map(|w| w.power_w).collect();
    Ok(Point {
        concurrency,
        throughput: all.len() as f64 * f64::from(batch) / elapsed.max(1e-9),
        p50_ms: percentile(&all, 50.0) / 1000.0,
        p95_ms: percentile(&all, 95.0) / 1000.0,
        p99_ms: percentile(&all, 99.0) / 1000.0,
        avg_ms: if all.is_empty() { 0.0 } else { all.iter().sum::<u64>() as f64 / all.len() as f64 / 1000.0 },
        queue_ms,
        compute_input_ms,
        compute_infer_ms,
        compute_output_ms,
        // The server's whole memory here; the run subtracts its reading from before the variant loaded.
        memory_mb: if target.is_local() { probe::memory_mb().unwrap_or(0.0) } else { 0.0 },
        gpu_memory_mb: if target.is_local() {
            probes.gpu_memory.as_ref().and_then(GpuMemoryProbe::read_mb)
        } else {
            None
        },
        cpu_percent: cpu,
        power_w: (!powers.is_empty()).then(|| powers.iter().sum::<f64>() / powers.len() as f64),
        stable: stable(&windows, batch, settings.stability_percent),
        satisfies: false,
    })
}

/// Runs the warm-up, then windows until stable or out of trials. The first entry returned is the
/// reading at the start of the first window (its latencies empty), so four or more are returned.
#[allow(clippy::too_many_arguments)]
async fn windows(
    target: &Target,
    model: &str,
    batch: u32,
    settings: &Settings,
    power: Option<&PowerProbe>,
    cancel: &watch::Receiver<bool>,
    done: &Mutex<Vec<u64>>,
    completed: &AtomicU64,
    failure: &Mutex<Option<String>>,
) -> Result<Vec<Window>, Stop> {
    let check = || -> Result<(), Stop> {
        if *cancel.borrow() {
            return Err(Stop::Cancelled);
        }
        match failure.lock().clone() {
            Some(e) => Err(Stop::Failed(e)),
            None => Ok(()),
        }
    };
    // Warm-up: the first requests (allocations, caches, thread pools) are not measured. It lasts one
    // window at most: a variant still cold after that fails the stability rule in its first window and
    // costs one more window, no more than a longer warm-up would (a slow variant spent up to five
    // windows here before).
    let warm_until = Instant::now() + settings.interval;
    while completed.load(Ordering::Relaxed) < u64::from(settings.warmup_requests) && Instant::now() < warm_until {
        check()?;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    check()?;
    // The CPU time of this process tree is the server's only when the server runs in it; under --via
    // it would be the load generator's, so none is recorded.
    let local = target.is_local();
    let reading = |latencies_us: Vec<u64>, elapsed: Duration, times: ServerTimes| Window {
        latencies_us,
        elapsed,
        times,
        cpu_seconds: if local { probe::cpu_seconds() } else { None },
        power_w: power.and_then(PowerProbe::take_mean),
    };
    let times = target.times(model).await.map_err(|e| Stop::Failed(e.message))?;
    done.lock().clear();
    let mut out = vec![reading(Vec::new(), Duration::ZERO, times)];
    let mut start = Instant::now();
    let trials = settings.max_trials.max(3);
    for trial in 0..trials {
        let mut cancel = cancel.clone();
        tokio::select! {
            _ = tokio::time::sleep(settings.interval) => {}
            _ = cancel.wait_for(|c| *c) => return Err(Stop::Cancelled),
        }
        check()?;
        let latencies = std::mem::take(&mut *done.lock());
        let elapsed = start.elapsed();
        start = Instant::now();
        let times = target.times(model).await.map_err(|e| Stop::Failed(e.message))?;
        out.push(reading(latencies, elapsed, times));
        if trial >= 2 && stable(&out[1..], batch, settings.stability_percent) {
            break;
        }
    }
    if out.iter().skip(1).all(|w| w.latencies_us.is_empty()) {
        return Err(Stop::Failed(format!(
            "no request completed in {} windows of {} ms",
            out.len() - 1,
            settings.interval.as_millis()
        )));
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
