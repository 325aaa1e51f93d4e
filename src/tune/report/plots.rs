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

/// Okabe and Ito's colour-blind-safe palette (Color Universal Design), in an order that keeps
/// neighbours apart; the yellow, faint on white, last. Past eight series the colours repeat and the
/// throughput plot's markers change shape instead (see [`Marker`]).
pub(super) const OKABE_ITO: [RGBColor; 8] = [
    RGBColor(0x00, 0x72, 0xB2), // blue
    RGBColor(0xD5, 0x5E, 0x00), // vermillion
    RGBColor(0x00, 0x9E, 0x73), // bluish green
    RGBColor(0xCC, 0x79, 0xA7), // reddish purple
    RGBColor(0xE6, 0x9F, 0x00), // orange
    RGBColor(0x56, 0xB4, 0xE9), // sky blue
    RGBColor(0x00, 0x00, 0x00), // black
    RGBColor(0xF0, 0xE4, 0x42), // yellow
];

/// The colour of the series at `index`.
fn color(index: usize) -> RGBColor {
    OKABE_ITO[index % OKABE_ITO.len()]
}

/// The marker of the series at `index`: a filled circle for the first eight, then a hollow circle,
/// then a triangle, so that two series of the same colour never look alike.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Marker {
    Dot,
    Ring,
    Triangle,
}

fn marker(index: usize) -> Marker {
    match (index / OKABE_ITO.len()) % 3 {
        0 => Marker::Dot,
        1 => Marker::Ring,
        _ => Marker::Triangle,
    }
}

/// The legend's and the bar names' font size, and the height of one legend line.
const LABEL_PX: u32 = 14;

const LEGEND_LINE: i32 = 20;

/// Where a legend label starts (after its line and marker), and the legend panel's narrowest width.
const LEGEND_TEXT_X: u32 = 40;

const LEGEND_MIN_W: u32 = 240;

/// Labels longer than this many characters are cut, with "..." and the whole name in an SVG
/// `<title>` (the tooltip); shorter ones are drawn whole, the panel widened to hold them.
const LEGEND_MAX_CHARS: usize = 96;

const BAR_NAME_MAX_CHARS: usize = 80;

/// An upper estimate of the width in pixels of `text` in a sans-serif font of `px` pixels (no font is
/// loaded to measure it): wide letters at 0.95 em, capitals and digits at 0.72 em, narrow ones at
/// 0.34 em, the rest at 0.6 em, each a little above DejaVu Sans's and Arial's advance widths.
pub(super) fn text_width_px(text: &str, px: u32) -> u32 {
    let em: f64 =
        text.chars()
            .map(|c| match c {
                'M' | 'W' | 'm' | 'w' | '@' | '%' => 0.95,
                'i' | 'j' | 'l' | 'I' | '.' | ',' | ':' | ';' | '\'' | '|' | '!' | ' ' | '(' | ')' | '[' | ']'
                | '/' => 0.34,
                'f' | 't' | 'r' => 0.45,
                c if c.is_ascii_uppercase() || c.is_ascii_digit() => 0.72,
                c if c.is_ascii() => 0.6,
                // Other scripts: as wide as a full-width glyph.
                _ => 1.0,
            })
            .sum();
    (em * f64::from(px)).ceil() as u32
}

/// `label` as drawn: whole when at most `max` characters, else cut; the cut ones are returned as
/// (drawn, whole) for [`add_titles`].
fn fit_label(label: &str, max: usize, cut: &mut Vec<(String, String)>) -> String {
    let drawn = shorten(label, max);
    if drawn != label {
        cut.push((drawn.clone(), label.to_string()));
    }
    drawn
}

fn svg_escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;").replace('\'', "&apos;")
}

/// Gives each cut label's `<text>` element a `<title>` child with the whole label (a browser shows it
/// on hover). plotters writes a text element's content on a line of its own, escaped as
/// [`svg_escape`] does.
fn add_titles(svg: String, cut: &[(String, String)]) -> String {
    cut.iter().fold(svg, |svg, (drawn, whole)| {
        let drawn = svg_escape(drawn);
        svg.replace(&format!("\n{drawn}\n</text>"), &format!("\n{drawn}<title>{}</title>\n</text>", svg_escape(whole)))
    })
}

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
    let mut cut = Vec::new();
    let labels: Vec<String> = series
        .iter()
        .map(|s| fit_label(&format!("{} ({})", s.variant.name, s.variant.candidate), LEGEND_MAX_CHARS, &mut cut))
        .collect();
    let legend_w = legend_width(&labels);
    let x = axis_range(series.iter().flat_map(|s| s.xy.iter().map(|p| p.0)));
    let y = axis_range(series.iter().flat_map(|s| s.xy.iter().map(|p| p.1)));
    let height = 480u32.max(60 + LEGEND_LINE as u32 * series.len() as u32);
    let width = 720 + legend_w;
    let mut svg = String::new();
    let drawn = (|| -> io::Result<()> {
        let root = SVGBackend::with_string(&mut svg, (width, height)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_err)?;
        let (plot, legend) = root.split_horizontally(width - legend_w);
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
            let color = color(s.color);
            chart.draw_series(LineSeries::new(s.xy.iter().copied(), color.stroke_width(2))).map_err(plot_err)?;
            for &p in &s.xy {
                draw_marker(chart.plotting_area(), p, s.color)?;
            }
        }
        // A legend of its own beside the chart: plotters' in-chart legend would cover the points once
        // there are more than a few variants.
        let label = TextStyle::from(("sans-serif", LABEL_PX).into_font()).pos(Pos::new(HPos::Left, VPos::Center));
        for (row, (s, text)) in series.iter().zip(labels).enumerate() {
            let y = 50 + LEGEND_LINE * row as i32;
            legend.draw(&PathElement::new(vec![(8, y), (32, y)], color(s.color).stroke_width(2))).map_err(plot_err)?;
            draw_marker(&legend, (20, y), s.color)?;
            legend.draw(&Text::new(text, (LEGEND_TEXT_X as i32, y), label.clone())).map_err(plot_err)?;
        }
        root.present().map_err(plot_err)
    })();
    Some(drawn.map(|()| add_titles(svg, &cut)))
}

/// The legend panel's width: room for its longest label after the line and marker, and a margin.
pub(super) fn legend_width(labels: &[String]) -> u32 {
    let longest = labels.iter().map(|l| text_width_px(l, LABEL_PX)).max().unwrap_or(0);
    LEGEND_MIN_W.max(LEGEND_TEXT_X + longest + 16)
}

/// The marker of series `index` at `at` (see [`marker`]).
fn draw_marker<DB: DrawingBackend, CT: plotters::coord::CoordTranslate>(
    area: &DrawingArea<DB, CT>,
    at: CT::From,
    index: usize,
) -> io::Result<()> {
    let c = color(index);
    match marker(index) {
        Marker::Dot => area.draw(&Circle::new(at, 3, c.filled())),
        Marker::Ring => area.draw(&Circle::new(at, 4, c.stroke_width(2))),
        Marker::Triangle => area.draw(&TriangleMarker::new(at, 5, c.filled())),
    }
    .map_err(plot_err)
}

/// A bar per measured variant of its shown point's power (when any point has a power reading) or
/// else the memory it adds to the server (see `Point::memory_mb`); the file kind ("power" or
/// "memory") and the SVG, `None` when no bars.
pub(super) fn resource_svg(
    model: &str,
    variants: &[&VariantResult],
    objective: Objective,
    power_source: Option<PowerSource>,
) -> Option<(&'static str, io::Result<String>)> {
    let power = variants.iter().any(|v| measured(v) && v.points.iter().any(|p| p.power_w.is_some()));
    let (kind, title, unit) = if power {
        ("power", power_source.unwrap_or(PowerSource::Board).describe(), "W")
    } else {
        ("memory", "memory added by each variant (PSS)", "MB")
    };
    let bars = bar_values(variants, objective, power);
    if bars.is_empty() {
        return None;
    }
    let n = bars.len();
    let x = axis_range(bars.iter().map(|b| b.2));
    // Room on the right for the value written after each bar.
    let x = x.start..x.end + (x.end - x.start) * 0.15;
    let mut cut = Vec::new();
    let names: Vec<String> = bars.iter().map(|b| fit_label(&b.1.name, BAR_NAME_MAX_CHARS, &mut cut)).collect();
    // The names are drawn right-aligned in the label area, 8 px before the axis.
    let name_w = 260.max(names.iter().map(|l| text_width_px(l, LABEL_PX)).max().unwrap_or(0) + 24);
    let (width, height) = (700 + name_w, 110 + 30 * n as u32);
    let mut svg = String::new();
    let drawn = (|| -> io::Result<()> {
        let root = SVGBackend::with_string(&mut svg, (width, height)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_err)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(format!("{model}: {title} at its best point"), ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(44)
            .y_label_area_size(name_w)
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
            .x_desc(if power { format!("{kind} ({unit})") } else { format!("memory added ({unit}, PSS)") })
            .draw()
            .map_err(plot_err)?;
        let name_style = TextStyle::from(("sans-serif", LABEL_PX).into_font()).pos(Pos::new(HPos::Right, VPos::Center));
        let value_style = TextStyle::from(("sans-serif", 13).into_font()).pos(Pos::new(HPos::Left, VPos::Center));
        for (row, ((i, _, value), name)) in bars.iter().zip(names).enumerate() {
            // The first variant at the top.
            let base = (n - 1 - row) as f64;
            let color = color(*i);
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [(0.0, base + 0.15), (*value, base + 0.85)],
                    color.filled(),
                )))
                .map_err(plot_err)?;
            let (px, py) = chart.backend_coord(&(0.0, base + 0.5));
            root.draw(&Text::new(name, (px - 8, py), name_style.clone())).map_err(plot_err)?;
            let (vx, _) = chart.backend_coord(&(*value, base + 0.5));
            let decimals = if power { 1 } else { 0 };
            root.draw(&Text::new(format!("{} {unit}", num(*value, decimals)), (vx + 6, py), value_style.clone()))
                .map_err(plot_err)?;
        }
        root.present().map_err(plot_err)
    })();
    Some((kind, drawn.map(|()| add_titles(svg, &cut))))
}

/// Each measured variant's bar: its index (its colour), itself, and its shown point's power (with
/// `power`) or memory, where finite.
fn bar_values<'v>(
    variants: &[&'v VariantResult],
    objective: Objective,
    power: bool,
) -> Vec<(usize, &'v VariantResult, f64)> {
    variants
        .iter()
        .enumerate()
        .filter(|(_, v)| measured(v))
        .filter_map(|(i, &v)| {
            let p = shown_point(v, objective)?;
            let value = if power { p.power_w? } else { p.memory_mb };
            value.is_finite().then_some((i, v, value))
        })
        .collect()
}
