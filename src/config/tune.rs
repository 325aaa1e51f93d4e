//! Flags of `tritonrs tune`: what to tune, the search space, how each point is measured, what wins,
//! and where the results go. Like every flag they are also keys of the configuration file.

use super::{ModelConfigArgs, RepositoryArgs};
use clap::Args;
use std::path::PathBuf;
use std::time::Duration;

/// What the search ranks by (`--objective`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Objective {
    /// Most inferences per second.
    #[default]
    Throughput,
    /// Lowest p99 latency.
    Latency,
    /// Most inferences per joule where a power sensor exists, else per CPU-second.
    Efficiency,
}

impl Objective {
    pub fn as_str(self) -> &'static str {
        match self {
            Objective::Throughput => "throughput",
            Objective::Latency => "latency",
            Objective::Efficiency => "efficiency",
        }
    }
}

/// How candidates are chosen (`--search`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SearchMode {
    /// Model Analyzer's quick search: a hill climb from the model's own configuration, one setting at
    /// a time, stopping when no neighbour improves the objective.
    Quick,
    /// Every combination of the search space (Model Analyzer's brute search).
    Brute,
    /// The candidates listed in a TOML file.
    Custom(PathBuf),
}

fn parse_search(s: &str) -> Result<SearchMode, String> {
    match s {
        "quick" => Ok(SearchMode::Quick),
        "brute" => Ok(SearchMode::Brute),
        _ => match s.strip_prefix("custom:") {
            Some(p) if !p.is_empty() => Ok(SearchMode::Custom(PathBuf::from(p))),
            _ => Err(format!("'{s}' is not a search mode (use quick, brute or custom:<file>)")),
        },
    }
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("'{s}' is not a duration such as 90s or 10m: {e}"))
}

fn parse_objective(s: &str) -> Result<Objective, String> {
    match s {
        "throughput" => Ok(Objective::Throughput),
        "latency" => Ok(Objective::Latency),
        "efficiency" => Ok(Objective::Efficiency),
        _ => Err(format!("'{s}' is not an objective (use throughput, latency or efficiency)")),
    }
}

fn positive(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("'{s}' is not a positive number")),
    }
}

fn concurrency(s: &str) -> Result<u32, String> {
    match s.parse::<u32>() {
        Ok(v) if (1..=4096).contains(&v) => Ok(v),
        _ => Err(format!("'{s}' is not a concurrency from 1 to 4096")),
    }
}

#[derive(Debug, Clone, Args)]
#[command(after_help = "Examples:
  # The best throughput for one model, Model Analyzer's quick search, 10 minutes at most:
  tritonrs tune --model-repository /var/lib/tritonrs/models --model yolov8n --budget 10m

  # Inferences per joule on a Jetson, p99 under 50 ms and under 10 W, every combination:
  tritonrs tune --model-repository models --model detector --search brute \\
      --objective efficiency --max-p99-ms 50 --max-power-w 10

  # Write the best configuration back into the repository (the old one is kept as config.pbtxt.bak-<time>):
  tritonrs tune --model-repository models --model detector --apply

  # Measure a running server over gRPC instead (adds load to it):
  tritonrs tune --model-repository models --model detector --via grpc://127.0.0.1:8001")]
#[command(mut_arg("model_repository", |a| {
    a.help("Model repository holding the models to tune (repeatable); only read unless --apply is given")
}))]
pub struct TuneArgs {
    #[command(flatten)]
    pub repository: RepositoryArgs,
    /// A model to tune (repeatable).
    #[arg(long = "model", value_name = "NAME", required = true)]
    pub models: Vec<String>,
    /// quick (Model Analyzer's quick search), brute (every combination) or custom:<file> (the
    /// candidates in a TOML file; see the README).
    #[arg(long, value_parser = parse_search, default_value = "quick", value_name = "MODE")]
    pub search: SearchMode,
    /// Stop starting new measurements after this long (e.g. 90s, 10m); what was measured is reported.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub budget: Option<Duration>,
    /// Concurrencies to measure each variant at (e.g. 1,2,4,8); default: doubling from 1 until
    /// throughput stops rising (by more than the stability percentage).
    #[arg(long, value_delimiter = ',', value_parser = concurrency)]
    pub concurrency: Vec<u32>,
    /// The highest concurrency the automatic sweep tries.
    #[arg(long, default_value_t = 64, value_parser = concurrency)]
    pub max_concurrency: u32,
    /// Most instances per device kind the search tries (Model Analyzer's max_instance_count).
    #[arg(long, default_value_t = 4)]
    pub max_instance_count: u32,
    /// Largest max_batch_size the search tries (powers of two, up to the model's own limit when it
    /// has one).
    #[arg(long, default_value_t = 16)]
    pub max_batch_size: u32,
    /// Length of one measurement window, in milliseconds.
    #[arg(long, default_value_t = 1000)]
    pub measurement_interval_ms: u64,
    /// Windows agree when throughput and p99 are within this percent of their mean.
    #[arg(long, default_value_t = 10.0, value_parser = positive)]
    pub stability_percentage: f64,
    /// Most windows measured for one point before taking the last three as they are.
    #[arg(long, default_value_t = 10)]
    pub max_trials: u32,
    /// Requests sent to each variant before measuring (for at most one measurement interval).
    #[arg(long, default_value_t = 20)]
    pub warmup_requests: u32,
    /// Input data in perf_analyzer's JSON format (`{"data": [{"INPUT0": [...]}, ...]}`); default:
    /// the model's warmup samples, else random data.
    #[arg(long, value_name = "FILE")]
    pub input_data: Option<PathBuf>,
    /// Size of variable dimensions (-1) in generated inputs, as `NAME:d1,d2` (repeatable; like
    /// perf_analyzer's --shape).
    #[arg(long = "shape", value_name = "NAME:DIMS")]
    pub shapes: Vec<String>,
    /// What ranks variants: throughput, latency (p99) or efficiency (inferences per joule, or per
    /// CPU-second where there is no power sensor).
    #[arg(long, value_parser = parse_objective, default_value = "throughput")]
    pub objective: Objective,
    /// A point counts only with p99 latency at most this many milliseconds.
    #[arg(long, value_parser = positive)]
    pub max_p99_ms: Option<f64>,
    /// A point counts only with at least this many inferences per second.
    #[arg(long, value_parser = positive)]
    pub min_throughput: Option<f64>,
    /// A point counts only with the process's resident memory (plus GPU memory) at most this many MB.
    #[arg(long, value_parser = positive)]
    pub max_memory_mb: Option<f64>,
    /// A point counts only with power at most this many watts: the board's on a Jetson (its input
    /// rail), the GPUs' draw (NVML) on a machine with NVIDIA GPUs.
    #[arg(long, value_parser = positive)]
    pub max_power_w: Option<f64>,
    /// Where the CSV, the HTML report and its plots go.
    #[arg(long, default_value = "tune-results", value_name = "DIR")]
    pub output_dir: PathBuf,
    /// Also write the best configuration as DIR/<model>/config.pbtxt and every variant as
    /// DIR/<model>_config_<n>/config.pbtxt, as Model Analyzer lays them out.
    #[arg(long, value_name = "DIR")]
    pub export: Option<PathBuf>,
    /// Write the best configuration into the repository (config.pbtxt, after a backup copy).
    #[arg(long)]
    pub apply: bool,
    /// Measure a running server over gRPC (grpc://HOST:PORT) instead of loading variants in-process.
    #[arg(long, value_name = "grpc://HOST:PORT")]
    pub via: Option<String>,
    /// With --via: do not wait before adding load to that server.
    #[arg(long)]
    pub yes: bool,
    /// No progress bar (it is also off when stderr is not a terminal).
    #[arg(long)]
    pub quiet: bool,
    /// As for the server: GPUs below this compute capability are not used (a Jetson Nano is 5.3).
    #[arg(long, env = "TRITONRS_MIN_SUPPORTED_COMPUTE_CAPABILITY", default_value_t = 6.0)]
    pub min_supported_compute_capability: f64,
    #[command(flatten)]
    pub model_config: ModelConfigArgs,
}

#[cfg(test)]
mod tests;
