//! The report of a tuning run: `metrics-model-inference.csv` in Model Analyzer's layout (so scripts
//! written for Model Analyzer read it), `report.html` with SVG plots beside it, and the summary table
//! printed on the terminal. Everything here only reads a [`TuneReport`].
//!
//! CSV layout, from Model Analyzer 1.58's source: the columns are `DEFAULT_INFERENCE_OUTPUT_FIELDS`
//! (config/input/config_defaults.py) with the headers of `ResultTableManager.headers`
//! (result/result_table_manager.py) and of each record type's `header()` (record/types/*.py); values
//! are rounded to one decimal as `_create_non_gpu_metric_row_entry` does. Rows are in Model Analyzer's
//! order: per model (in the order first measured), its variants best first by the objective (a
//! variant ranks by its best point that meets the constraints, or by its best point when none does,
//! as `RunConfigResultComparator` does, except that variants meeting the constraints come first, as
//! in Model Analyzer's top configurations), and within a variant the points that meet the constraints
//! best first, then those that do not, best first (`ResultTableManager._tabulate_measurements`).

use std::cmp::Ordering;
use std::fmt::Write as _;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::results::{Constraints, Objective, Point, PowerSource, TuneReport, VariantResult};

/// The CSV's file name, Model Analyzer's `DEFAULT_FILENAME_MODEL_INFERENCE`.
pub const CSV_FILE: &str = "metrics-model-inference.csv";
/// The HTML report's file name.
pub const HTML_FILE: &str = "report.html";

/// Model Analyzer's default inference columns, in its order and with its header text.
const MA_COLUMNS: [&str; 9] = [
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
const EXTRA_COLUMNS: [&str; 14] = [
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

/// What [`write_all`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    /// `metrics-model-inference.csv`.
    pub csv: PathBuf,
    /// `report.html`.
    pub html: PathBuf,
    /// The plots the HTML embeds, beside it.
    pub svgs: Vec<PathBuf>,
}

/// Creates `dir` and writes the CSV, the HTML report and its plots into it.
pub fn write_all(report: &TuneReport, dir: &Path) -> io::Result<Written> {
    fs::create_dir_all(dir)?;
    let csv = dir.join(CSV_FILE);
    write_csv(report, &csv)?;
    let (html, svgs) = write_html(report, dir)?;
    Ok(Written { csv, html, svgs })
}

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

/// Writes `report.html` and the SVG plots it embeds into `dir` (created if missing); returns the
/// HTML's path and the plots' paths.
pub fn write_html(report: &TuneReport, dir: &Path) -> io::Result<(PathBuf, Vec<PathBuf>)> {
    fs::create_dir_all(dir)?;
    let mut svgs = Vec::new();
    let mut plots = Vec::new(); // per model, the file names its section embeds
    let mut taken = Vec::new();
    for model in models(report) {
        let stem = unique_stem(&model, &mut taken);
        let mut files = Vec::new();
        let variants = model_variants(report, &model);
        if let Some(svg) = throughput_vs_p99_svg(&model, &variants) {
            files.push((format!("{stem}_throughput_vs_p99.svg"), svg));
        }
        if let Some((kind, svg)) = resource_svg(&model, &variants, report.objective, report.power_source) {
            files.push((format!("{stem}_{kind}.svg"), svg));
        }
        let mut names = Vec::new();
        for (name, svg) in files {
            let svg = svg?;
            let path = dir.join(&name);
            fs::write(&path, svg)?;
            svgs.push(path);
            names.push(name);
        }
        plots.push((model, names));
    }
    let html = dir.join(HTML_FILE);
    fs::write(&html, render_html(report, &plots))?;
    Ok((html, svgs))
}

/// The terminal summary: one block per model with each variant's best point (or why it was skipped),
/// `*` marking the model's best variant. Plain text in fixed-width columns.
pub fn summary_table(report: &TuneReport) -> String {
    let mut s = String::new();
    let _ =
        writeln!(s, "objective: {}; constraints: {}", report.objective.as_str(), constraints_text(&report.constraints));
    if let Some(note) = &report.incomplete {
        let _ = writeln!(s, "incomplete: {}", shorten(note, 100));
    }
    let header = ["", "variant", "candidate", "conc", "infer/s", "p99 ms", "RSS MB", "power W", "efficiency", "ok"];
    // Text columns are left-aligned, numbers right-aligned.
    let right = [false, false, false, true, true, true, true, true, true, false];
    for model in models(report) {
        let best = best_variant(report, &model);
        let _ = writeln!(s, "\nmodel {model}:");
        let mut rows: Vec<Vec<String>> = vec![header.iter().map(|h| h.to_string()).collect()];
        let mut skipped = Vec::new();
        for (i, v) in report.variants.iter().enumerate().filter(|(_, v)| v.model == model) {
            let mark = if Some(i) == best { "*" } else { "" }.to_string();
            if let Some(err) = &v.error {
                skipped.push((mark, v, shorten(err, 70)));
                continue;
            }
            let Some(p) = shown_point(v, report.objective) else {
                skipped.push((mark, v, "no points".to_string()));
                continue;
            };
            let mut row = vec![mark, v.name.clone(), v.candidate.to_string()];
            row.extend(point_cells(p));
            row.push(if p.satisfies { "yes" } else { "no" }.to_string());
            rows.push(row);
        }
        let mut widths = vec![0; header.len()];
        for row in &rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        for row in &rows {
            let mut line = String::new();
            for (c, cell) in row.iter().enumerate() {
                let pad = widths[c].saturating_sub(cell.chars().count());
                if c > 0 {
                    line.push_str("  ");
                }
                if right[c] {
                    line.extend(std::iter::repeat_n(' ', pad));
                    line.push_str(cell);
                } else {
                    line.push_str(cell);
                    line.extend(std::iter::repeat_n(' ', pad));
                }
            }
            let _ = writeln!(s, "{}", line.trim_end());
        }
        for (mark, v, why) in skipped {
            let line = format!(
                "{:w0$}  {:w1$}  {:w2$}  skipped: {why}",
                mark,
                v.name,
                v.candidate.to_string(),
                w0 = widths[0],
                w1 = widths[1],
                w2 = widths[2]
            );
            let _ = writeln!(s, "{}", line.trim_end());
        }
        if best.is_none() {
            let _ = writeln!(s, "no variant met the constraints");
        }
    }
    if report.variants.is_empty() {
        let _ = writeln!(s, "\nno variants were measured");
    }
    s
}

/// The models in the order first measured, then any only named in `report.best`.
fn models(report: &TuneReport) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for name in report.variants.iter().map(|v| &v.model).chain(report.best.iter().map(|(m, _)| m)) {
        if !out.contains(name) {
            out.push(name.clone());
        }
    }
    out
}

/// The index in `report.variants` of the model's best variant, if the search found one.
fn best_variant(report: &TuneReport, model: &str) -> Option<usize> {
    report
        .best
        .iter()
        .find(|(m, _)| m == model)
        .and_then(|(_, b)| *b)
        .filter(|&i| report.variants.get(i).is_some_and(|v| v.model == model))
}

/// The model's variants in the order measured.
fn model_variants<'a>(report: &'a TuneReport, model: &str) -> Vec<&'a VariantResult> {
    report.variants.iter().filter(|v| v.model == model).collect()
}

/// Whether a variant has rows: measured without an error.
fn measured(v: &VariantResult) -> bool {
    v.error.is_none() && !v.points.is_empty()
}

/// How good a point is under the objective, higher better; NaN and a missing efficiency rank last.
fn score(p: &Point, objective: Objective) -> f64 {
    p.score(objective)
}

/// Best first.
fn by_score(a: &Point, b: &Point, objective: Objective) -> Ordering {
    score(b, objective).total_cmp(&score(a, objective))
}

/// The point a variant is shown and ranked by: its best point under the constraints as the search
/// chose it, else its best point by the objective alone (Model Analyzer ranks failing configs so).
fn shown_point(v: &VariantResult, objective: Objective) -> Option<&Point> {
    v.best.and_then(|i| v.points.get(i)).or_else(|| {
        let satisfying = v.points.iter().filter(|p| p.satisfies).min_by(|a, b| by_score(a, b, objective));
        satisfying.or_else(|| v.points.iter().min_by(|a, b| by_score(a, b, objective)))
    })
}

/// The model's measured variants, best first (stable, so ties keep the measured order).
fn ranked_variants<'a>(report: &'a TuneReport, model: &str) -> Vec<&'a VariantResult> {
    let mut out: Vec<&VariantResult> = model_variants(report, model).into_iter().filter(|v| measured(v)).collect();
    // Variants with a point that meets the constraints come first (Model Analyzer's CSV can list a
    // failing variant above passing ones; its own "top configs" do not).
    let passes = |v: &VariantResult| v.points.iter().any(|p| p.satisfies);
    out.sort_by(|a, b| {
        passes(b).cmp(&passes(a)).then_with(|| {
            match (shown_point(a, report.objective), shown_point(b, report.objective)) {
                (Some(pa), Some(pb)) => by_score(pa, pb, report.objective),
                _ => Ordering::Equal,
            }
        })
    });
    out
}

/// A variant's points: those meeting the constraints best first, then the others best first.
fn ranked_points(v: &VariantResult, objective: Objective) -> Vec<&Point> {
    let mut out: Vec<&Point> = v.points.iter().collect();
    out.sort_by(|a, b| b.satisfies.cmp(&a.satisfies).then_with(|| by_score(a, b, objective)));
    out
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
        ma_float(p.rss_mb),
        opt(p.gpu_memory_mb),
        opt(p.power_w),
        // Efficiency can be well under 1 infer/J, so it keeps three decimals.
        p.efficiency().filter(|e| e.is_finite()).map(|e| format!("{e:.3}")).unwrap_or_default(),
        p.efficiency_unit().to_string(),
        yes_no(p.stable),
    ]
}

fn yes_no(b: bool) -> String {
    if b { "Yes" } else { "No" }.to_string()
}

/// A number with fixed decimals for tables; "-" when not finite.
fn num(x: f64, decimals: usize) -> String {
    if x.is_finite() {
        format!("{x:.decimals$}")
    } else {
        "-".to_string()
    }
}

fn efficiency_text(p: &Point) -> String {
    match p.efficiency() {
        Some(e) if e.is_finite() => format!("{e:.2} {}", p.efficiency_unit()),
        _ => "-".to_string(),
    }
}

fn constraints_text(c: &Constraints) -> String {
    let mut parts = Vec::new();
    if let Some(x) = c.max_p99_ms {
        parts.push(format!("p99 <= {x} ms"));
    }
    if let Some(x) = c.min_throughput {
        parts.push(format!("throughput >= {x} infer/s"));
    }
    if let Some(x) = c.max_memory_mb {
        parts.push(format!("memory <= {x} MB"));
    }
    if let Some(x) = c.max_power_w {
        parts.push(format!("power <= {x} W"));
    }
    if parts.is_empty() {
        "none".to_string()
    } else {
        parts.join(", ")
    }
}

/// The first non-blank line of `text`, cut to `max` characters; "..." says something was left out.
fn shorten(text: &str, max: usize) -> String {
    let line = text.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or("");
    if line.chars().count() <= max && line == text.trim() {
        return line.to_string();
    }
    let cut: String = line.chars().take(max.saturating_sub(3)).collect();
    format!("{cut}...")
}

/// A file-name stem for a model: ASCII letters, digits, `-` and `_` only (no dots, so no hidden or
/// relative names; safe in a URL too), bounded in length, and distinct from those already taken.
fn unique_stem(model: &str, taken: &mut Vec<String>) -> String {
    let mut base: String = model
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' })
        .take(100)
        .collect();
    if base.is_empty() {
        base = "model".to_string();
    }
    let mut stem = base.clone();
    let mut n = 2;
    while taken.contains(&stem) {
        stem = format!("{base}-{n}");
        n += 1;
    }
    taken.push(stem.clone());
    stem
}

fn html_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

const CSS: &str = "body{font-family:sans-serif;margin:2em;color:#222}\
table{border-collapse:collapse;margin:1em 0;font-size:0.9em}\
th,td{border:1px solid #ccc;padding:4px 8px;text-align:left}\
td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}\
tr.best{background:#e8f5e9;font-weight:bold}\
pre{background:#f5f5f5;padding:1em;overflow-x:auto}\
.note{color:#a15c00}.err{color:#b00020;min-width:10em}td.c{min-width:11em}\
img{max-width:100%;display:block;margin:1em 0}";

fn render_html(report: &TuneReport, plots: &[(String, Vec<String>)]) -> String {
    let mut h = String::new();
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>tritonrs tune report</title>\n\
         <style>{CSS}</style>\n</head>\n<body>\n<h1>tritonrs tune report</h1>\n<table>\n"
    );
    let _ = writeln!(h, "<tr><th>Objective</th><td>{}</td></tr>", report.objective.as_str());
    let _ =
        writeln!(h, "<tr><th>Constraints</th><td>{}</td></tr>", html_escape(&constraints_text(&report.constraints)));
    let _ = writeln!(h, "<tr><th>Measured by</th><td>{}</td></tr>", html_escape(&report.measured_by));
    let power = match report.power_source {
        Some(PowerSource::Board) => "the board's input rail (Jetson)",
        Some(PowerSource::Gpus) => "the GPUs' draw through NVML (not the CPU's)",
        None => "not measured (efficiency is per CPU-second)",
    };
    let _ = writeln!(h, "<tr><th>Power</th><td>{power}</td></tr>");
    let _ = writeln!(h, "<tr><th>Variants</th><td>{}</td></tr>\n</table>", report.variants.len());
    if let Some(note) = &report.incomplete {
        let _ = writeln!(h, "<p class=\"note\">Incomplete run: {}</p>", html_escape(note));
    }
    if plots.is_empty() {
        let _ = writeln!(h, "<p>No variants were measured.</p>");
    }
    for (model, files) in plots {
        let best = best_variant(report, model);
        let _ = writeln!(h, "<h2>Model {}</h2>", html_escape(model));
        match best.and_then(|i| report.variants.get(i)) {
            Some(v) => best_section(&mut h, v, report.objective),
            None => {
                let _ = writeln!(h, "<p class=\"note\">No variant met the constraints.</p>");
            }
        }
        variants_table(&mut h, report, model, best);
        if files.is_empty() {
            let _ = writeln!(h, "<p>No measurements to plot.</p>");
        }
        for f in files {
            let _ = writeln!(h, "<img src=\"{0}\" alt=\"{0}\">", html_escape(f));
        }
    }
    h.push_str("</body>\n</html>\n");
    h
}

fn best_section(h: &mut String, v: &VariantResult, objective: Objective) {
    let _ = writeln!(
        h,
        "<h3>Best: {} <small>({})</small></h3>",
        html_escape(&v.name),
        html_escape(&v.candidate.to_string())
    );
    if let Some(p) = shown_point(v, objective) {
        let opt = |x: Option<f64>, d: usize| x.map_or_else(|| "-".to_string(), |x| num(x, d));
        let rows = [
            ("Concurrency", p.concurrency.to_string()),
            ("Throughput (infer/s)", num(p.throughput, 1)),
            (
                "p50 / p95 / p99 latency (ms)",
                format!("{} / {} / {}", num(p.p50_ms, 2), num(p.p95_ms, 2), num(p.p99_ms, 2)),
            ),
            ("Average latency (ms)", num(p.avg_ms, 2)),
            (
                "Server queue / input / infer / output (ms)",
                format!(
                    "{} / {} / {} / {}",
                    num(p.queue_ms, 2),
                    num(p.compute_input_ms, 2),
                    num(p.compute_infer_ms, 2),
                    num(p.compute_output_ms, 2)
                ),
            ),
            ("CPU (% of one core)", num(p.cpu_percent, 0)),
            ("RSS (MB)", num(p.rss_mb, 0)),
            ("GPU memory (MB)", opt(p.gpu_memory_mb, 0)),
            ("Power (W)", opt(p.power_w, 1)),
            ("Efficiency", efficiency_text(p)),
            ("Stable", yes_no(p.stable)),
        ];
        h.push_str("<table>\n");
        for (k, val) in rows {
            let _ = writeln!(h, "<tr><th>{k}</th><td class=\"n\">{}</td></tr>", html_escape(&val));
        }
        h.push_str("</table>\n");
    }
    let _ = writeln!(h, "<p>config.pbtxt:</p>\n<pre>{}</pre>", html_escape(&v.config_pbtxt));
}

/// A point as the terminal table and the HTML table show it: concurrency, throughput, p99, memory,
/// power and efficiency.
fn point_cells(p: &Point) -> [String; 6] {
    [
        p.concurrency.to_string(),
        num(p.throughput, 1),
        num(p.p99_ms, 2),
        num(p.rss_mb, 0),
        p.power_w.map_or_else(|| "-".to_string(), |w| num(w, 1)),
        efficiency_text(p),
    ]
}

fn variants_table(h: &mut String, report: &TuneReport, model: &str, best: Option<usize>) {
    h.push_str(
        "<table>\n<tr><th>Variant</th><th>Candidate</th><th>Concurrency</th><th>Throughput (infer/s)</th>\
         <th>p99 (ms)</th><th>RSS (MB)</th><th>Power (W)</th><th>Efficiency</th><th>Satisfies</th><th>Error</th></tr>\n",
    );
    for (i, v) in report.variants.iter().enumerate().filter(|(_, v)| v.model == model) {
        let class = if Some(i) == best { " class=\"best\"" } else { "" };
        let cells: Vec<String> = match shown_point(v, report.objective).filter(|_| v.error.is_none()) {
            Some(p) => point_cells(p).into_iter().chain([yes_no(p.satisfies)]).collect(),
            None => vec!["-".to_string(); 7],
        };
        let _ = write!(
            h,
            "<tr{class}><td>{}</td><td class=\"c\">{}</td>",
            html_escape(&v.name),
            html_escape(&v.candidate.to_string())
        );
        for c in &cells {
            let _ = write!(h, "<td class=\"n\">{}</td>", html_escape(c));
        }
        let _ = writeln!(h, "<td class=\"err\">{}</td></tr>", html_escape(v.error.as_deref().unwrap_or("")));
    }
    h.push_str("</table>\n");
}

fn plot_err<E: std::fmt::Display>(e: E) -> io::Error {
    io::Error::other(format!("plot: {e}"))
}

/// `lo..hi` covering `values` and zero with some headroom; never empty, whatever the values.
fn axis_range(values: impl Iterator<Item = f64>) -> std::ops::Range<f64> {
    let (mut lo, mut hi) = (0.0f64, 0.0f64);
    for v in values.filter(|v| v.is_finite()) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    let span = hi - lo;
    if !(span.is_finite() && span > 0.0) {
        return lo..lo + 1.0;
    }
    (if lo < 0.0 { lo - span * 0.05 } else { 0.0 })..hi + span * 0.08
}

/// Width of the legend panel beside the throughput plot, and the height of one legend line.
const LEGEND_W: u32 = 360;
const LEGEND_LINE: i32 = 20;

/// One variant's line in the throughput plot.
struct Series<'a> {
    /// The variant's index among its model's variants, which picks its colour in every plot.
    color: usize,
    variant: &'a VariantResult,
    /// (p99 ms, infer/s) in concurrency order, finite values only.
    xy: Vec<(f64, f64)>,
}

/// Throughput against p99 latency, one line per measured variant; `None` when nothing can be plotted.
fn throughput_vs_p99_svg(model: &str, variants: &[&VariantResult]) -> Option<io::Result<String>> {
    let series: Vec<Series> = variants
        .iter()
        .enumerate()
        .filter(|(_, v)| measured(v))
        .map(|(color, v)| {
            let mut pts: Vec<&Point> = v.points.iter().collect();
            pts.sort_by_key(|p| p.concurrency);
            let xy =
                pts.iter().map(|p| (p.p99_ms, p.throughput)).filter(|(x, y)| x.is_finite() && y.is_finite()).collect();
            Series { color, variant: v, xy }
        })
        .filter(|s| !s.xy.is_empty())
        .collect();
    if series.is_empty() {
        return None;
    }
    let x = axis_range(series.iter().flat_map(|s| s.xy.iter().map(|p| p.0)));
    let y = axis_range(series.iter().flat_map(|s| s.xy.iter().map(|p| p.1)));
    let height = 480u32.max(60 + LEGEND_LINE as u32 * series.len() as u32);
    let width = 720 + LEGEND_W;
    let mut svg = String::new();
    let drawn = (|| -> io::Result<()> {
        let root = SVGBackend::with_string(&mut svg, (width, height)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_err)?;
        let (plot, legend) = root.split_horizontally(width - LEGEND_W);
        let mut chart = ChartBuilder::on(&plot)
            .caption(format!("{model}: throughput vs p99 latency"), ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(44)
            .y_label_area_size(70)
            .build_cartesian_2d(x, y)
            .map_err(plot_err)?;
        chart
            .configure_mesh()
            .label_style(("sans-serif", 13))
            .axis_desc_style(("sans-serif", 14))
            .x_desc("p99 latency (ms)")
            .y_desc("throughput (infer/s)")
            .draw()
            .map_err(plot_err)?;
        for s in &series {
            let color = Palette99::pick(s.color);
            chart.draw_series(LineSeries::new(s.xy.iter().copied(), color.stroke_width(2))).map_err(plot_err)?;
            chart.draw_series(s.xy.iter().map(|&p| Circle::new(p, 3, color.filled()))).map_err(plot_err)?;
        }
        // A legend of its own beside the chart: plotters' in-chart legend would cover the points once
        // there are more than a few variants.
        let label = TextStyle::from(("sans-serif", 14).into_font()).pos(Pos::new(HPos::Left, VPos::Center));
        for (row, s) in series.iter().enumerate() {
            let y = 50 + LEGEND_LINE * row as i32;
            let color = Palette99::pick(s.color);
            legend.draw(&PathElement::new(vec![(8, y), (32, y)], color.stroke_width(2))).map_err(plot_err)?;
            legend.draw(&Circle::new((20, y), 3, color.filled())).map_err(plot_err)?;
            let text = shorten(&format!("{} ({})", s.variant.name, s.variant.candidate), 48);
            legend.draw(&Text::new(text, (40, y), label.clone())).map_err(plot_err)?;
        }
        root.present().map_err(plot_err)
    })();
    Some(drawn.map(|()| svg))
}

/// A bar per measured variant of its shown point's power (when any point has a power reading) or
/// else its resident memory; the file kind ("power" or "memory") and the SVG, `None` when no bars.
fn resource_svg(
    model: &str,
    variants: &[&VariantResult],
    objective: Objective,
    power_source: Option<PowerSource>,
) -> Option<(&'static str, io::Result<String>)> {
    let measured: Vec<(usize, &VariantResult)> =
        variants.iter().enumerate().filter(|(_, v)| measured(v)).map(|(i, v)| (i, *v)).collect();
    let power = measured.iter().any(|(_, v)| v.points.iter().any(|p| p.power_w.is_some()));
    let (kind, title, unit) = if power {
        ("power", power_source.unwrap_or(PowerSource::Board).describe(), "W")
    } else {
        ("memory", "resident memory (RSS)", "MB")
    };
    let bars: Vec<(usize, &VariantResult, f64)> = measured
        .iter()
        .filter_map(|&(i, v)| {
            let p = shown_point(v, objective)?;
            let value = if power { p.power_w? } else { p.rss_mb };
            value.is_finite().then_some((i, v, value))
        })
        .collect();
    if bars.is_empty() {
        return None;
    }
    let n = bars.len();
    let x = axis_range(bars.iter().map(|b| b.2));
    // Room on the right for the value written after each bar.
    let x = x.start..x.end + (x.end - x.start) * 0.15;
    let (width, height) = (960u32, 110 + 30 * n as u32);
    let mut svg = String::new();
    let drawn = (|| -> io::Result<()> {
        let root = SVGBackend::with_string(&mut svg, (width, height)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_err)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(format!("{model}: {title} at each variant's best point"), ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(44)
            .y_label_area_size(260)
            .build_cartesian_2d(x, 0.0..n as f64)
            .map_err(plot_err)?;
        // The variant names are drawn by hand at the bars' centres; the y axis has no numbers of
        // its own to show.
        chart
            .configure_mesh()
            .disable_y_mesh()
            .y_label_formatter(&|_: &f64| String::new())
            .set_tick_mark_size(LabelAreaPosition::Left, 0)
            .label_style(("sans-serif", 13))
            .axis_desc_style(("sans-serif", 14))
            .x_desc(format!("{kind} ({unit})"))
            .draw()
            .map_err(plot_err)?;
        let name_style = TextStyle::from(("sans-serif", 14).into_font()).pos(Pos::new(HPos::Right, VPos::Center));
        let value_style = TextStyle::from(("sans-serif", 13).into_font()).pos(Pos::new(HPos::Left, VPos::Center));
        for (row, (i, v, value)) in bars.iter().enumerate() {
            // The first variant at the top.
            let base = (n - 1 - row) as f64;
            let color = Palette99::pick(*i);
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [(0.0, base + 0.15), (*value, base + 0.85)],
                    color.filled(),
                )))
                .map_err(plot_err)?;
            let (px, py) = chart.backend_coord(&(0.0, base + 0.5));
            root.draw(&Text::new(shorten(&v.name, 34), (px - 8, py), name_style.clone())).map_err(plot_err)?;
            let (vx, _) = chart.backend_coord(&(*value, base + 0.5));
            let decimals = if power { 1 } else { 0 };
            root.draw(&Text::new(format!("{} {unit}", num(*value, decimals)), (vx + 6, py), value_style.clone()))
                .map_err(plot_err)?;
        }
        root.present().map_err(plot_err)
    })();
    Some((kind, drawn.map(|()| svg)))
}

#[cfg(test)]
mod tests {
    use super::super::results::{Accelerator, Candidate};
    use super::*;

    fn point(concurrency: u32, throughput: f64, p99_ms: f64, satisfies: bool) -> Point {
        Point {
            concurrency,
            throughput,
            p50_ms: p99_ms / 2.0,
            p95_ms: p99_ms * 0.9,
            p99_ms,
            avg_ms: p99_ms / 2.0,
            queue_ms: 0.1,
            compute_input_ms: 0.2,
            compute_infer_ms: 1.25,
            compute_output_ms: 0.05,
            rss_mb: 512.0,
            gpu_memory_mb: None,
            cpu_percent: 150.0,
            power_w: None,
            stable: true,
            satisfies,
        }
    }

    fn variant(model: &str, n: usize, candidate: Candidate, points: Vec<Point>, best: Option<usize>) -> VariantResult {
        VariantResult {
            model: model.to_string(),
            name: if n == 0 { format!("{model}_config_default") } else { format!("{model}_config_{n}") },
            candidate,
            config_pbtxt: format!("name: \"{model}\"\nmax_batch_size: 8\n"),
            points,
            error: None,
            best,
        }
    }

    fn cpu(count: u32) -> Candidate {
        Candidate { instance_count: count, max_batch_size: 8, ..Default::default() }
    }

    /// Model `m<&>` with three variants (config_1 best, config_2 failed to load) and a second model.
    fn sample() -> TuneReport {
        let mut failed = variant("m<&>", 2, cpu(4), vec![], None);
        failed.error = Some("failed to load: <bad> & worse\nsecond line".to_string());
        let gpu = Candidate { gpu: true, accelerator: Accelerator::Cuda, ..cpu(2) };
        TuneReport {
            objective: Objective::Throughput,
            constraints: Constraints { max_p99_ms: Some(20.0), ..Default::default() },
            variants: vec![
                variant(
                    "m<&>",
                    0,
                    cpu(1),
                    vec![point(1, 100.0, 5.0, true), point(2, 150.0, 12.0, true), point(4, 160.0, 30.0, false)],
                    Some(1),
                ),
                variant(
                    "m<&>",
                    1,
                    gpu,
                    vec![point(1, 200.0, 4.0, true), point(2, 300.04, 9.96, true), point(4, 500.0, 25.0, false)],
                    Some(1),
                ),
                failed,
                variant("other", 0, cpu(1), vec![point(1, 50.0, 1.0, true)], Some(0)),
            ],
            best: vec![("m<&>".to_string(), Some(1)), ("other".to_string(), Some(3))],
            measured_by: "in-process".to_string(),
            power_source: None,
            incomplete: None,
        }
    }

    #[test]
    fn csv_has_model_analyzer_headers_and_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(CSV_FILE);
        write_csv(&sample(), &path).unwrap();
        let text = fs::read_to_string(&path).unwrap();
        assert!(text.starts_with(
            "Model,Batch,Concurrency,Model Config Path,Instance Group,Max Batch Size,Satisfies Constraints,\
             Throughput (infer/sec),p99 Latency (ms),"
        ));
        let mut reader = csv::Reader::from_path(&path).unwrap();
        let headers = reader.headers().unwrap().clone();
        assert_eq!(headers.len(), MA_COLUMNS.len() + EXTRA_COLUMNS.len());
        let rows: Vec<csv::StringRecord> = reader.records().map(|r| r.unwrap()).collect();
        // 3 + 3 points for m<&> (the failed variant has none), 1 for other.
        assert_eq!(rows.len(), 7);
        let col = |name: &str| headers.iter().position(|h| h == name).unwrap();
        // Best variant first, its satisfying points best first, then the failing one.
        let first = &rows[0];
        assert_eq!(&first[col("Model")], "m<&>");
        assert_eq!(&first[col("Model Config Path")], "m<&>_config_1");
        assert_eq!(&first[col("Concurrency")], "2");
        assert_eq!(&first[col("Batch")], "1");
        assert_eq!(&first[col("Instance Group")], "2:GPU");
        assert_eq!(&first[col("Max Batch Size")], "8");
        assert_eq!(&first[col("Satisfies Constraints")], "Yes");
        assert_eq!(&first[col("Throughput (infer/sec)")], "300.0");
        assert_eq!(&first[col("p99 Latency (ms)")], "10.0");
        assert_eq!(&first[col("RAM Usage (MB)")], "512.0");
        assert_eq!(&first[col("Power Usage (W)")], "");
        assert_eq!(&first[col("Efficiency")], "200.027");
        assert_eq!(&first[col("Efficiency Unit")], "infer/CPU-s");
        assert_eq!(&first[col("Stable")], "Yes");
        let order: Vec<(&str, &str)> =
            rows.iter().map(|r| (&r[col("Model Config Path")], &r[col("Concurrency")])).collect();
        assert_eq!(
            order,
            [
                ("m<&>_config_1", "2"),
                ("m<&>_config_1", "1"),
                ("m<&>_config_1", "4"),
                ("m<&>_config_default", "2"),
                ("m<&>_config_default", "1"),
                ("m<&>_config_default", "4"),
                ("other_config_default", "1"),
            ]
        );
        assert_eq!(&rows[2][col("Satisfies Constraints")], "No");
        assert_eq!(&rows[3][col("Instance Group")], "1:CPU");
    }

    #[test]
    fn csv_ranks_by_latency_objective() {
        let mut r = sample();
        r.objective = Objective::Latency;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(CSV_FILE);
        write_csv(&r, &path).unwrap();
        let mut reader = csv::Reader::from_path(&path).unwrap();
        let rows: Vec<csv::StringRecord> = reader.records().map(|r| r.unwrap()).collect();
        // config_1's best p99 (4 ms) beats the default's (5 ms); lowest latency first.
        assert_eq!(&rows[0][3], "m<&>_config_1");
        assert_eq!(&rows[0][2], "1");
        assert_eq!(&rows[1][2], "2");
    }

    #[test]
    fn csv_lists_variants_meeting_the_constraints_first() {
        let fast_but_failing = variant("m", 0, Candidate::default(), vec![point(1, 900.0, 50.0, false)], None);
        let passing = variant("m", 1, Candidate::default(), vec![point(1, 100.0, 5.0, true)], Some(0));
        let r = TuneReport { variants: vec![fast_but_failing, passing], ..Default::default() };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(CSV_FILE);
        write_csv(&r, &path).unwrap();
        let rows: Vec<csv::StringRecord> =
            csv::Reader::from_path(&path).unwrap().records().map(|r| r.unwrap()).collect();
        assert_eq!(&rows[0][6], "Yes");
        assert_eq!(&rows[1][6], "No");
    }

    #[test]
    fn html_escapes_and_embeds_existing_svgs() {
        let dir = tempfile::tempdir().unwrap();
        let written = write_all(&sample(), dir.path()).unwrap();
        assert!(written.csv.is_file());
        let html = fs::read_to_string(&written.html).unwrap();
        assert!(html.contains("Model m&lt;&amp;&gt;"));
        assert!(html.contains("failed to load: &lt;bad&gt; &amp; worse"));
        assert!(!html.contains("<bad>"));
        assert!(!html.contains("<script"));
        assert!(html.contains("<pre>name: &quot;m&lt;&amp;&gt;&quot;"));
        let srcs: Vec<&str> = html.split("<img src=\"").skip(1).filter_map(|s| s.split('"').next()).collect();
        // Two plots per model (throughput vs p99, memory).
        assert_eq!(srcs.len(), 4, "{srcs:?}");
        assert!(srcs.contains(&"m____throughput_vs_p99.svg"));
        assert!(srcs.contains(&"m____memory.svg"));
        for src in &srcs {
            assert!(!src.contains('/'));
            assert!(dir.path().join(src).is_file(), "{src} missing");
        }
        assert_eq!(written.svgs.len(), 4);
        let svg = fs::read_to_string(dir.path().join("m____throughput_vs_p99.svg")).unwrap();
        assert!(svg.starts_with("<svg"));
        // Labels are <text> elements, escaped by plotters.
        assert!(svg.contains("<text"));
        assert!(svg.contains("m&lt;&amp;&gt;_config_1 (2xGPU mbs=8 cuda)"));
        assert!(svg.contains("p99 latency (ms)"));
        let bars = fs::read_to_string(dir.path().join("m____memory.svg")).unwrap();
        assert!(bars.contains("512 MB"));
    }

    #[test]
    fn power_plot_when_power_measured() {
        let mut r = sample();
        for p in &mut r.variants[1].points {
            p.power_w = Some(7.5);
        }
        let dir = tempfile::tempdir().unwrap();
        let w = write_all(&r, dir.path()).unwrap();
        let names: Vec<String> = w.svgs.iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
        assert!(names.contains(&"m____power.svg".to_string()), "{names:?}");
        assert!(names.contains(&"other_memory.svg".to_string()), "{names:?}");
        let svg = fs::read_to_string(dir.path().join("m____power.svg")).unwrap();
        assert!(svg.contains("7.5 W"));
        let csv = fs::read_to_string(&w.csv).unwrap();
        assert!(csv.contains(",7.5,40.005,infer/J,Yes"), "{csv}");
        assert!(csv.lines().next().unwrap().contains(",Power Usage (W),"), "{csv}");
        assert!(svg.contains("board power"), "{svg}");
    }

    #[test]
    fn gpu_power_takes_model_analyzers_column_and_names_itself() {
        let mut r = sample();
        r.power_source = Some(PowerSource::Gpus);
        for p in &mut r.variants[1].points {
            p.power_w = Some(312.0);
        }
        let dir = tempfile::tempdir().unwrap();
        let w = write_all(&r, dir.path()).unwrap();
        let csv = fs::read_to_string(&w.csv).unwrap();
        let header = csv.lines().next().unwrap();
        assert!(header.contains(",GPU Power Usage (W),") && !header.contains(",Power Usage (W),"), "{header}");
        let svg = fs::read_to_string(dir.path().join("m____power.svg")).unwrap();
        assert!(svg.contains("GPU power") && svg.contains("312.0 W"), "{svg}");
        let html = fs::read_to_string(&w.html).unwrap();
        assert!(html.contains("<th>Power</th><td>the GPUs' draw through NVML"), "{html}");
    }

    #[test]
    fn empty_single_point_and_errors_do_not_panic() {
        let dir = tempfile::tempdir().unwrap();
        let empty = TuneReport::default();
        let w = write_all(&empty, &dir.path().join("empty")).unwrap();
        assert!(w.svgs.is_empty());
        let csv = fs::read_to_string(&w.csv).unwrap();
        assert_eq!(csv.lines().count(), 1);
        assert!(fs::read_to_string(&w.html).unwrap().contains("No variants were measured"));
        assert!(summary_table(&empty).contains("no variants were measured"));

        // One point, all values equal or zero, a NaN, and a model whose only variant failed.
        let mut one = point(1, 0.0, 0.0, false);
        one.rss_mb = f64::NAN;
        one.cpu_percent = 0.0;
        let mut broken = variant("broken", 0, cpu(1), vec![], None);
        broken.error = Some("x".repeat(500));
        let r = TuneReport {
            variants: vec![variant("solo", 0, cpu(1), vec![one], None), broken],
            best: vec![("solo".to_string(), None), ("broken".to_string(), None), ("ghost".to_string(), Some(7))],
            ..Default::default()
        };
        let w = write_all(&r, &dir.path().join("odd")).unwrap();
        let csv = fs::read_to_string(&w.csv).unwrap();
        assert_eq!(csv.lines().count(), 2, "{csv}");
        assert!(csv.contains(",nan,"));
        // solo: a throughput plot but no memory bars (its only RSS is NaN); broken and ghost: none.
        assert_eq!(w.svgs.len(), 1, "{:?}", w.svgs);
        let s = summary_table(&r);
        assert!(s.contains("skipped: xxx"));
        assert!(s.lines().all(|l| l.len() < 200), "{s}");
        assert!(!s.contains('*'));
    }

    #[test]
    fn summary_marks_best_variant() {
        let s = summary_table(&sample());
        let line = |name: &str| s.lines().find(|l| l.contains(name)).unwrap().to_string();
        let best = line("m<&>_config_1 ");
        assert!(best.starts_with('*'), "{s}");
        assert!(best.contains("2xGPU mbs=8 cuda"));
        assert!(best.contains("300.0"));
        assert!(best.contains("9.96"));
        assert!(best.contains("200.03 infer/CPU-s"));
        assert!(!line("m<&>_config_default").starts_with('*'));
        let failed = line("m<&>_config_2");
        assert!(failed.contains("skipped: failed to load: <bad> & worse..."), "{s}");
        assert!(line("other_config_default").starts_with('*'));
        // Fixed-width columns: the header's and the rows' throughput columns end at the same place.
        let header = s.lines().find(|l| l.contains("infer/s")).unwrap();
        let end = header.find("infer/s").unwrap() + "infer/s".len();
        assert_eq!(&best[end - 5..end], "300.0");
    }

    #[test]
    fn shorten_keeps_one_line() {
        assert_eq!(shorten("short", 10), "short");
        assert_eq!(shorten("\n  first\nsecond", 10), "first...");
        assert_eq!(shorten("abcdefghijkl", 8), "abcde...");
        assert_eq!(shorten("", 8), "");
    }

    #[test]
    fn stems_are_safe_and_distinct() {
        let mut taken = Vec::new();
        assert_eq!(unique_stem("a/b", &mut taken), "a_b");
        assert_eq!(unique_stem("a_b", &mut taken), "a_b-2");
        assert_eq!(unique_stem("..", &mut taken), "__");
        assert_eq!(unique_stem("", &mut taken), "model");
        assert_eq!(unique_stem(&"é".repeat(300), &mut taken).len(), 100);
    }
}
