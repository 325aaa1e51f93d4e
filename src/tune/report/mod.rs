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
//!
//! Files: `csv_file.rs` (the CSV), `html.rs` and `plots.rs` (the HTML report and its SVGs),
//! `summary.rs` (the terminal table), over `rank.rs` (the order of rows) and `text.rs` (how values
//! read). Imports go one way: this file uses the writers, the writers use `rank` and `text`.

mod csv_file;
mod html;
mod plots;
mod rank;
mod summary;
mod text;

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::results::TuneReport;

pub use csv_file::{write_csv, CSV_FILE};
pub use html::{write_html, HTML_FILE};
pub use summary::summary_table;

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

#[cfg(test)]
mod tests;
