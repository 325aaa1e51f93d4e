//! `metrics-model-inference.csv` in Model Analyzer's layout (see the folder's doc for where the
//! columns, rounding and row order come from).

use std::io;
use std::path::Path;

use super::super::results::{Point, PowerSource, TuneReport, VariantResult};
use super::rank::{models, ranked_points, ranked_variants};
use super::text::yes_no;

/// The CSV's file name, Model Analyzer's `DEFAULT_FILENAME_MODEL_INFERENCE`.
pub const CSV_FILE: &str = "metrics-model-inference.csv";

/// Model Analyzer's default inference columns, in its order and with its header text.
pub(super) const MA_COLUMNS: [&str; 9] = [
    "Model",
    "Batch",
    "Concurrency",
    "Model Config Path",
    "Instance Group",
    "Max Batch Size",
    "Satisfies Constraints",
    "Throughput (infer/sec)",
    "p99 Latency (ms)",
];

/// The power column's header for a Jetson's board power; GPU power takes Model Analyzer's own.
const BOARD_POWER_COLUMN: &str = "Power Usage (W)";

const GPU_POWER_COLUMN: &str = "GPU Power Usage (W)";

/// Columns after Model Analyzer's defaults: its own header text where it has the record
/// (perf_latency_p95, perf_latency_avg, perf_server_*, cpu_used_ram, gpu_used_memory), names in its
/// style where it has none (p50, CPU use), and ours for the rest. Power read from the GPUs (NVML)
/// takes Model Analyzer's "GPU Power Usage (W)" instead of the board's "Power Usage (W)" (Jetson
/// rails; see [`power_column`]).
pub(super) const EXTRA_COLUMNS: [&str; 14] = [
    "p50 Latency (ms)",
    "p95 Latency (ms)",
    "Avg Latency (ms)",
    "Server Queue time (ms)",
    "Server Compute Input time (ms)",
    "Server Compute Infer time (ms)",
    "Server Compute Output time (ms)",
    "CPU Utilization (%)",
    "RAM Usage (MB)",
    "GPU Memory Usage (MB)",
    BOARD_POWER_COLUMN,
    "Efficiency",
    "Efficiency Unit",
    "Stable",
];

/// Writes every measured point as a row of Model Analyzer's `metrics-model-inference.csv`; variants
/// that were skipped (an error) or have no points get no rows.
pub fn write_csv(report: &TuneReport, path: &Path) -> io::Result<()> {
    let mut out = csv::Writer::from_path(path)?;
    let power = power_column(report.power_source);
    let header = EXTRA_COLUMNS.iter().map(|&c| if c == BOARD_POWER_COLUMN { power } else { c });
    out.write_record(MA_COLUMNS.iter().copied().chain(header))?;
    for model in models(report) {
        for v in ranked_variants(report, &model) {
            for p in ranked_points(v, report.objective) {
                out.write_record(csv_row(v, p))?;
            }
        }
    }
    out.flush()
}

/// The CSV header of the power column: Model Analyzer's own where the readings are the GPUs'.
fn power_column(source: Option<PowerSource>) -> &'static str {
    match source {
        Some(PowerSource::Gpus) => GPU_POWER_COLUMN,
        _ => BOARD_POWER_COLUMN,
    }
}

/// A float as Model Analyzer writes it: `str(round(value, 1))`.
fn ma_float(x: f64) -> String {
    if x.is_nan() {
        "nan".to_string()
    } else if x.is_infinite() {
        if x > 0.0 { "inf" } else { "-inf" }.to_string()
    } else {
        format!("{x:.1}")
    }
}

fn csv_row(v: &VariantResult, p: &Point) -> Vec<String> {
    let c = &v.candidate;
    let opt = |x: Option<f64>| x.map(ma_float).unwrap_or_default();
    vec![
        v.model.clone(),
        "1".to_string(),
        p.concurrency.to_string(),
        v.name.clone(),
        // Model Analyzer's `instance_group_string`: "<count>:<kind>".
        format!("{}:{}", c.instance_count, if c.gpu { "GPU" } else { "CPU" }),
        c.max_batch_size.to_string(),
        yes_no(p.satisfies),
        ma_float(p.throughput),
        ma_float(p.p99_ms),
        ma_float(p.p50_ms),
        ma_float(p.p95_ms),
        ma_float(p.avg_ms),
        ma_float(p.queue_ms),
        ma_float(p.compute_input_ms),
        ma_float(p.compute_infer_ms),
        ma_float(p.compute_output_ms),
        ma_float(p.cpu_percent),
        ma_float(p.memory_mb),
        opt(p.gpu_memory_mb),
        opt(p.power_w),
        // Efficiency can be well under 1 infer/J, so it keeps three decimals.
        p.efficiency().filter(|e| e.is_finite()).map(|e| format!("{e:.3}")).unwrap_or_default(),
        p.efficiency_unit().to_string(),
        yes_no(p.stable),
    ]
}
