//! How numbers, constraints and long messages read in the terminal table and the HTML report.

use super::super::results::{Constraints, Point};

/// The memory figure's name in the HTML tables (the CSV keeps Model Analyzer's "RAM Usage (MB)").
pub(super) const MEMORY_HEADER: &str = "Memory added (MB, PSS)";

/// The memory figure in one terminal line.
pub(super) const MEMORY_SHORT: &str =
    "mem MB: what each variant adds to the server's PSS (after its load, less before it)";

/// What the memory figure is, said once in each report.
pub(super) const MEMORY_MEANING: &str = "what each variant adds to the server: the proportional set size (PSS) \
    of the server and its stub processes at the end of the point (the stubs' fork server, started once per \
    server, left out), less the same reading taken just before the variant loaded, with the previous variant \
    unloaded; the same figure as the CSV's \"RAM Usage (MB)\"";

pub(super) fn yes_no(b: bool) -> String {
    if b { "Yes" } else { "No" }.to_string()
}

/// A number with fixed decimals for tables; "-" when not finite.
pub(super) fn num(x: f64, decimals: usize) -> String {
    if x.is_finite() {
        format!("{x:.decimals$}")
    } else {
        "-".to_string()
    }
}

pub(super) fn efficiency_text(p: &Point) -> String {
    match p.efficiency() {
        Some(e) if e.is_finite() => format!("{e:.2} {}", p.efficiency_unit()),
        _ => "-".to_string(),
    }
}

pub(super) fn constraints_text(c: &Constraints) -> String {
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
pub(super) fn shorten(text: &str, max: usize) -> String {
    let line = text.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or("");
    if line.chars().count() <= max && line == text.trim() {
        return line.to_string();
    }
    let cut: String = line.chars().take(max.saturating_sub(3)).collect();
    format!("{cut}...")
}

/// A point as the terminal table and the HTML table show it: concurrency, throughput, p99, memory,
/// power and efficiency.
pub(super) fn point_cells(p: &Point) -> [String; 6] {
    [
        p.concurrency.to_string(),
        num(p.throughput, 1),
        num(p.p99_ms, 2),
        num(p.memory_mb, 0),
        p.power_w.map_or_else(|| "-".to_string(), |w| num(w, 1)),
        efficiency_text(p),
    ]
}
