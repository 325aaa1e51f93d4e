//! The summary table printed on the terminal at the end of a tuning run.

use std::fmt::Write as _;

use super::super::results::TuneReport;
use super::rank::{best_variant, models, shown_point};
use super::text::{constraints_text, point_cells, shorten, MEMORY_SHORT};

/// The terminal summary: one block per model with each variant's best point (or why it was skipped),
/// `*` marking the model's best variant. Plain text in fixed-width columns.
pub fn summary_table(report: &TuneReport) -> String {
    let mut s = String::new();
    let _ =
        writeln!(s, "objective: {}; constraints: {}", report.objective.as_str(), constraints_text(&report.constraints));
    if let Some(note) = &report.incomplete {
        let _ = writeln!(s, "incomplete: {}", shorten(note, 100));
    }
    let _ = writeln!(s, "{MEMORY_SHORT}");
    let header = ["", "variant", "candidate", "conc", "infer/s", "p99 ms", "mem MB", "power W", "efficiency", "ok"];
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
