//! The SVG plots of `report.html`: throughput against p99 latency, and each variant's power or memory.

use std::io;

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::super::results::{Objective, Point, PowerSource, VariantResult};
use super::rank::{measured, shown_point};
use super::text::{num, shorten};

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
pub(super) fn throughput_vs_p99_svg(model: &str, variants: &[&VariantResult]) -> Option<io::Result<String>> {
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
pub(super) fn resource_svg(
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
