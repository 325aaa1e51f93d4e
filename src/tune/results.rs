//! What a tuning run measured: the variants it tried, each one's points of the concurrency sweep, and
//! how they rank. The report (`report`), the exported configurations (`export`) and the terminal
//! summary all read these; nothing here measures.

use std::fmt;

pub use crate::config::tune::Objective;

/// Limits a point must meet to count (`--max-p99-ms`, `--min-throughput`, `--max-memory-mb`, `--max-power-w`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Constraints {
    pub max_p99_ms: Option<f64>,
    pub min_throughput: Option<f64>,
    pub max_memory_mb: Option<f64>,
    pub max_power_w: Option<f64>,
}

impl Constraints {
    /// The limits `tune`'s flags set.
    pub fn from_args(args: &crate::config::tune::TuneArgs) -> Constraints {
        Constraints {
            max_p99_ms: args.max_p99_ms,
            min_throughput: args.min_throughput,
            max_memory_mb: args.max_memory_mb,
            max_power_w: args.max_power_w,
        }
    }

    /// Whether `p` meets every limit. Memory is the variant's own (see [`Point::memory_mb`]) plus the GPU
    /// memory in use; a power limit with no power reading is not met (nothing says it holds).
    pub fn satisfied_by(&self, p: &Point) -> bool {
        let memory = p.memory_mb + p.gpu_memory_mb.unwrap_or(0.0);
        self.max_p99_ms.is_none_or(|m| p.p99_ms <= m)
            && self.min_throughput.is_none_or(|m| p.throughput >= m)
            && self.max_memory_mb.is_none_or(|m| memory <= m)
            && self.max_power_w.is_none_or(|m| p.power_w.is_some_and(|w| w <= m))
    }

    pub fn is_empty(&self) -> bool {
        *self == Constraints::default()
    }
}

/// Where a variant's instances run and with which accelerator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Accelerator {
    /// The model's own setting (CPU for KIND_CPU, the backend's default on a GPU).
    #[default]
    Default,
    /// ONNX Runtime's CUDA execution provider.
    Cuda,
    /// ONNX Runtime's TensorRT execution provider with FP16.
    TensorRtFp16,
}

/// One point in the search space: the settings a variant changes in the model's configuration.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Candidate {
    /// `instance_group { count }`.
    pub instance_count: u32,
    /// `instance_group { kind: KIND_GPU }` when true, else KIND_CPU.
    pub gpu: bool,
    /// `max_batch_size` (0: the model does not batch).
    pub max_batch_size: u32,
    /// `dynamic_batching { }` with its queue delay in microseconds and preferred sizes; `None`: off.
    pub dynamic_batching: Option<(u64, Vec<u32>)>,
    /// ONNX Runtime `intra_op_thread_count` / `inter_op_thread_count` parameters (`None`: the default).
    pub intra_op_threads: Option<u32>,
    pub inter_op_threads: Option<u32>,
    pub accelerator: Accelerator,
    /// A TensorRT plan's `instance_group { profile: [...] }`: the optimization profiles its instances
    /// use (empty: the backend's choice, one profile per instance where the engine has one each).
    pub profiles: Vec<String>,
}

impl fmt::Display for Candidate {
    /// A short description for tables: `2xCPU mbs=8 db(100us) intra=2`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}x{}", self.instance_count, if self.gpu { "GPU" } else { "CPU" })?;
        if self.max_batch_size > 0 {
            write!(f, " mbs={}", self.max_batch_size)?;
        }
        if let Some((delay, preferred)) = &self.dynamic_batching {
            write!(f, " db({delay}us")?;
            if !preferred.is_empty() {
                let p: Vec<String> = preferred.iter().map(u32::to_string).collect();
                write!(f, " pref={}", p.join("/"))?;
            }
            write!(f, ")")?;
        }
        if let Some(n) = self.intra_op_threads {
            write!(f, " intra={n}")?;
        }
        if let Some(n) = self.inter_op_threads {
            write!(f, " inter={n}")?;
        }
        match self.accelerator {
            Accelerator::Default => {}
            Accelerator::Cuda => write!(f, " cuda")?,
            Accelerator::TensorRtFp16 => write!(f, " trt-fp16")?,
        }
        if !self.profiles.is_empty() {
            write!(f, " profile={}", self.profiles.join("/"))?;
        }
        Ok(())
    }
}

/// One measured concurrency of one variant (the mean over the stable windows).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Point {
    /// Requests in flight.
    pub concurrency: u32,
    /// Inferences per second (a request of batch B counts B).
    pub throughput: f64,
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub p99_ms: f64,
    pub avg_ms: f64,
    /// The server's mean per-request queue and compute times over the windows, from its statistics.
    pub queue_ms: f64,
    pub compute_input_ms: f64,
    pub compute_infer_ms: f64,
    pub compute_output_ms: f64,
    /// What the variant costs in memory, in MB: the proportional set size (PSS) of the server's process
    /// and of the processes it started (Python stubs, so pages they share count once; the stubs' fork
    /// server, started once per server, is left out) at the end of the point, less the same reading
    /// taken just before the variant loaded, with the previous variant unloaded and freed heap given
    /// back to the system. So it does not grow with the run's order. 0 under `--via`.
    pub memory_mb: f64,
    /// GPU memory in use by the process (NVML) where a GPU is visible.
    pub gpu_memory_mb: Option<f64>,
    /// The server's CPU use (its process and the ones it started), in percent of one core (200 = two
    /// cores busy).
    pub cpu_percent: f64,
    /// Mean power over the windows: the board's on a Jetson, the GPUs' (NVML) on a machine with
    /// NVIDIA GPUs (see [`TuneReport::power_source`]); `None` without a reading.
    pub power_w: Option<f64>,
    /// Whether three windows agreed within the stability percentage (else the last windows' mean).
    pub stable: bool,
    /// Whether this point meets every constraint.
    pub satisfies: bool,
}

impl Point {
    /// Inferences per joule (with a power reading) or per CPU-second (without); `None` when the
    /// process used no measurable CPU.
    pub fn efficiency(&self) -> Option<f64> {
        match self.power_w {
            Some(w) if w > 0.0 => Some(self.throughput / w),
            Some(_) => None,
            None if self.cpu_percent > 0.0 => Some(self.throughput / (self.cpu_percent / 100.0)),
            None => None,
        }
    }

    /// How good the point is under `objective`, higher better; NaN and a missing efficiency rank last.
    pub fn score(&self, objective: Objective) -> f64 {
        let s = match objective {
            Objective::Throughput => self.throughput,
            Objective::Latency => -self.p99_ms,
            Objective::Efficiency => self.efficiency().unwrap_or(f64::NEG_INFINITY),
        };
        if s.is_nan() {
            f64::NEG_INFINITY
        } else {
            s
        }
    }

    /// The unit `efficiency` is in.
    pub fn efficiency_unit(&self) -> &'static str {
        if self.power_w.is_some() {
            "infer/J"
        } else {
            "infer/CPU-s"
        }
    }
}

/// One variant: a candidate as loaded, and what happened when it was measured.
#[derive(Debug, Clone, PartialEq)]
pub struct VariantResult {
    /// The model it tunes.
    pub model: String,
    /// Its name as Model Analyzer names them: `<model>_config_default` for the configuration as it is,
    /// `<model>_config_<n>` for the others.
    pub name: String,
    pub candidate: Candidate,
    /// The complete configuration it was loaded with, in config.pbtxt form (`name` is the model's).
    pub config_pbtxt: String,
    /// The sweep, in increasing concurrency.
    pub points: Vec<Point>,
    /// Why it was skipped (failed to load, a request failed), if it was.
    pub error: Option<String>,
    /// The index in `points` of the variant's best point under the constraints, if any meets them.
    pub best: Option<usize>,
}

impl VariantResult {
    /// Marks each point that meets `constraints` and picks the best of those under `objective`.
    pub fn rank(&mut self, objective: Objective, constraints: &Constraints) {
        for p in &mut self.points {
            p.satisfies = constraints.satisfied_by(p);
        }
        self.best = self
            .points
            .iter()
            .enumerate()
            .filter(|(_, p)| p.satisfies)
            .max_by(|(_, a), (_, b)| a.score(objective).total_cmp(&b.score(objective)))
            .map(|(i, _)| i);
    }

    /// The best point under the constraints, if any.
    pub fn best_point(&self) -> Option<&Point> {
        self.best.and_then(|i| self.points.get(i))
    }
}

impl TuneReport {
    /// The best variant of `model`: the one whose best point scores highest (the first measured on a tie).
    pub fn best_of(&self, model: &str) -> Option<usize> {
        let mut best: Option<(usize, f64)> = None;
        for (i, v) in self.variants.iter().enumerate().filter(|(_, v)| v.model == model && v.error.is_none()) {
            let Some(p) = v.best_point() else { continue };
            let s = p.score(self.objective);
            if best.is_none_or(|(_, b)| s > b) {
                best = Some((i, s));
            }
        }
        best.map(|(i, _)| i)
    }
}

/// What a run's power readings measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PowerSource {
    /// A Jetson's input rail: the whole board, CPU and GPU together.
    Board,
    /// NVML's draw summed over the machine's NVIDIA GPUs: the GPUs only, not the CPU.
    Gpus,
}

impl PowerSource {
    /// Its name in prose ("board power").
    pub fn describe(self) -> &'static str {
        match self {
            PowerSource::Board => "board power",
            PowerSource::Gpus => "GPU power",
        }
    }
}

/// A whole run, as the report shows it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TuneReport {
    pub objective: Objective,
    pub constraints: Constraints,
    /// Every variant tried, in the order measured.
    pub variants: Vec<VariantResult>,
    /// Per model, the index in `variants` of the best variant (its best point meets the constraints).
    pub best: Vec<(String, Option<usize>)>,
    /// `in-process` or the `--via` address.
    pub measured_by: String,
    /// What the points' `power_w` measures; `None` where nothing gave a power reading.
    pub power_source: Option<PowerSource>,
    /// Whether the run ended early (Ctrl-C or the budget) and what is missing.
    pub incomplete: Option<String>,
}

#[cfg(test)]
mod tests;
