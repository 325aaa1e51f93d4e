//! `report.html`: the run's settings, per model its best variant and every variant's shown point, and
//! the SVG plots, written beside it, that it embeds.

use std::fmt::Write as _;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::super::results::{Objective, PowerSource, TuneReport, VariantResult};
use super::plots::{resource_svg, throughput_vs_p99_svg};
use super::rank::{best_variant, model_variants, models, shown_point};
use super::text::{constraints_text, efficiency_text, num, point_cells, yes_no, MEMORY_HEADER, MEMORY_MEANING};

/// The HTML report's file name.
pub const HTML_FILE: &str = "report.html";

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

/// A file-name stem for a model: ASCII letters, digits, `-` and `_` only (no dots, so no hidden or
/// relative names; safe in a URL too), bounded in length, and distinct from those already taken.
pub(super) fn unique_stem(model: &str, taken: &mut Vec<String>) -> String {
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
    let _ = writeln!(h, "<tr><th>Memory</th><td>{}</td></tr>", html_escape(MEMORY_MEANING));
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
            (MEMORY_HEADER, num(p.memory_mb, 0)),
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

fn variants_table(h: &mut String, report: &TuneReport, model: &str, best: Option<usize>) {
    let _ = writeln!(
        h,
        "<table>\n<tr><th>Variant</th><th>Candidate</th><th>Concurrency</th><th>Throughput (infer/s)</th>\
         <th>p99 (ms)</th><th>{MEMORY_HEADER}</th><th>Power (W)</th><th>Efficiency</th><th>Satisfies</th><th>Error</th></tr>",
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
