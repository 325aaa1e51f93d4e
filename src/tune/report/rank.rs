//! The order the report shows models, variants and points in (Model Analyzer's, see the folder's
//! doc), shared by the CSV, the HTML and the terminal table.

use std::cmp::Ordering;

use super::super::results::{Objective, Point, TuneReport, VariantResult};

/// The models in the order first measured, then any only named in `report.best`.
pub(super) fn models(report: &TuneReport) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for name in report.variants.iter().map(|v| &v.model).chain(report.best.iter().map(|(m, _)| m)) {
        if !out.contains(name) {
            out.push(name.clone());
        }
    }
    out
}

/// The index in `report.variants` of the model's best variant, if the search found one.
pub(super) fn best_variant(report: &TuneReport, model: &str) -> Option<usize> {
    report
        .best
        .iter()
        .find(|(m, _)| m == model)
        .and_then(|(_, b)| *b)
        .filter(|&i| report.variants.get(i).is_some_and(|v| v.model == model))
}

/// The model's variants in the order measured.
pub(super) fn model_variants<'a>(report: &'a TuneReport, model: &str) -> Vec<&'a VariantResult> {
    report.variants.iter().filter(|v| v.model == model).collect()
}

/// Whether a variant has rows: measured without an error.
pub(super) fn measured(v: &VariantResult) -> bool {
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
pub(super) fn shown_point(v: &VariantResult, objective: Objective) -> Option<&Point> {
    v.best.and_then(|i| v.points.get(i)).or_else(|| {
        let satisfying = v.points.iter().filter(|p| p.satisfies).min_by(|a, b| by_score(a, b, objective));
        satisfying.or_else(|| v.points.iter().min_by(|a, b| by_score(a, b, objective)))
    })
}

/// The model's measured variants, best first (stable, so ties keep the measured order).
pub(super) fn ranked_variants<'a>(report: &'a TuneReport, model: &str) -> Vec<&'a VariantResult> {
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
pub(super) fn ranked_points(v: &VariantResult, objective: Objective) -> Vec<&Point> {
    let mut out: Vec<&Point> = v.points.iter().collect();
    out.sort_by(|a, b| b.satisfies.cmp(&a.satisfies).then_with(|| by_score(a, b, objective)));
    out
}
