//! Tests of the report: the CSV's layout and order, the HTML and its plots, the terminal table.

use super::super::results::{Accelerator, Candidate, Constraints, Objective, Point, PowerSource, VariantResult};
use super::csv_file::{EXTRA_COLUMNS, MA_COLUMNS};
use super::html::unique_stem;
use super::plots;
use super::text::shorten;
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
        memory_mb: 512.0,
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
    let rows: Vec<csv::StringRecord> = csv::Reader::from_path(&path).unwrap().records().map(|r| r.unwrap()).collect();
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
    // Every memory figure says what it is, the same in each place, and none calls it RSS.
    assert!(bars.contains("memory added by each variant (PSS)") && bars.contains("memory added (MB, PSS)"), "{bars}");
    assert!(html.contains("<th>Memory added (MB, PSS)</th>"), "{html}");
    assert!(html.contains("<tr><th>Memory</th><td>what each variant adds to the server"), "{html}");
    assert!(summary_table(&sample()).contains("mem MB: what each variant adds to the server's PSS"));
    for text in [&html, &bars, &summary_table(&sample())] {
        assert!(!text.contains("RSS"), "{text}");
    }
}

/// A model whose variants have the given names, each measured at two points.
fn named(names: &[String]) -> TuneReport {
    let variants = names
        .iter()
        .enumerate()
        .map(|(i, name)| VariantResult {
            name: name.clone(),
            ..variant("m", i, cpu(1), vec![point(1, 10.0 * (i + 1) as f64, 2.0, true), point(2, 15.0, 3.0, true)], None)
        })
        .collect();
    TuneReport { variants, ..Default::default() }
}

/// The `width` attribute of an SVG's root element.
fn svg_width(svg: &str) -> u32 {
    let at = svg.find("width=\"").unwrap() + 7;
    svg[at..].split('"').next().unwrap().parse().unwrap()
}

#[test]
fn legend_labels_fit_and_long_ones_are_cut_with_a_title() {
    let long = format!("a_rather_long_model_name_from_a_Model_Zoo_{}_config_12", "WM".repeat(8));
    let too_long = format!("{}_config_3", "x".repeat(120));
    let r = named(&[long.clone(), too_long.clone(), "short".into()]);
    let dir = tempfile::tempdir().unwrap();
    write_all(&r, dir.path()).unwrap();
    let svg = fs::read_to_string(dir.path().join("m_throughput_vs_p99.svg")).unwrap();
    // The long label is drawn whole, and the legend panel (the width beyond the 720 px plot) holds it.
    let label = format!("{long} (1xCPU mbs=8)");
    assert!(svg.contains(&format!("\n{label}\n</text>")), "{svg}");
    let legend = svg_width(&svg) - 720;
    assert!(legend >= 40 + plots::text_width_px(&label, 14), "legend {legend} px for {label}");
    let cut = format!("{}...", &format!("{too_long} (1xCPU mbs=8)")[..93]);
    assert!(legend >= 40 + plots::text_width_px(&cut, 14), "legend {legend} px for {cut}");
    // A label past 96 characters is cut, and its whole text is the element's <title>.
    assert!(!svg.contains(&format!("\n{too_long} (1xCPU mbs=8)\n</text>")), "{svg}");
    assert!(svg.contains(&format!("...<title>{too_long} (1xCPU mbs=8)</title>\n</text>")), "{svg}");
    // The bar chart's names fit its label area the same way.
    let bars = fs::read_to_string(dir.path().join("m_memory.svg")).unwrap();
    assert!(bars.contains(&format!("\n{long}\n</text>")), "{bars}");
    assert!(svg_width(&bars) - 700 >= plots::text_width_px(&long, 14) + 8, "{bars}");
    assert!(bars.contains(&format!("...<title>{too_long}</title>\n</text>")), "{bars}");
}

#[test]
fn text_width_estimate_errs_wide() {
    // Arial's advance widths at 14 px: "W" 13.2, "i" 3.1, "a" 7.8, "0" 7.8.
    assert!(plots::text_width_px("W", 14) >= 13);
    assert!(plots::text_width_px("i", 14) >= 3);
    assert!(plots::text_width_px("a0", 14) >= 16);
    assert_eq!(plots::text_width_px("", 14), 0);
}

#[test]
fn every_series_takes_an_okabe_ito_colour_none_twice_in_the_first_eight() {
    let names: Vec<String> = (0..9).map(|i| format!("m_config_{i}")).collect();
    let dir = tempfile::tempdir().unwrap();
    write_all(&named(&names), dir.path()).unwrap();
    let svg = fs::read_to_string(dir.path().join("m_throughput_vs_p99.svg")).unwrap();
    let hex = |c: &plotters::style::RGBColor| format!("#{:02X}{:02X}{:02X}", c.0, c.1, c.2);
    let colours: Vec<String> = plots::OKABE_ITO.iter().map(hex).collect();
    for c in &colours {
        assert!(svg.contains(&format!("stroke=\"{c}\"")), "{c} missing: {svg}");
    }
    // The polylines (one per series) use only the palette.
    for line in svg.lines().filter(|l| l.contains("<polyline")) {
        let stroke = line.split("stroke=\"").nth(1).unwrap().split('"').next().unwrap();
        assert!(colours.iter().any(|c| c == stroke), "{stroke} is not Okabe-Ito: {line}");
    }
    // The ninth series repeats the first colour with a hollow marker instead of a dot.
    assert!(svg.contains("fill=\"none\""), "{svg}");
    let bars = fs::read_to_string(dir.path().join("m_memory.svg")).unwrap();
    for c in &colours {
        assert!(bars.contains(&format!("fill=\"{c}\"")), "{c} missing from the bars");
    }
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
    one.memory_mb = f64::NAN;
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
