//! Unit tests of `metrics_text.rs`.

use super::*;

#[test]
fn label_values_escape_backslash_quote_and_line_feed() {
    assert_eq!(escape_label_value("plain-GPU_0.1"), "plain-GPU_0.1");
    assert!(matches!(escape_label_value("plain"), Cow::Borrowed(_)));
    assert_eq!(escape_label_value("a\\b\"c\nd\te"), "a\\\\b\\\"c\\nd\te");
    assert_eq!(escape_label_value("\"\\\n"), "\\\"\\\\\\n");
    assert_eq!(escape_label_value("é\u{1F600}"), "é\u{1F600}");
}

#[test]
fn header_lines() {
    let mut out = String::new();
    header(&mut out, "nv_inference_count", "Number of inferences", Kind::Counter);
    header(&mut out, "g", "", Kind::Gauge);
    header(&mut out, "h", "two\nlines \\ \"kept\"", Kind::Histogram);
    assert_eq!(
        out,
        "# HELP nv_inference_count Number of inferences\n# TYPE nv_inference_count counter\n\
             # HELP g \n# TYPE g gauge\n\
             # HELP h two lines \\ \"kept\"\n# TYPE h histogram\n"
    );
}

#[test]
fn samples_with_and_without_labels() {
    let mut out = String::new();
    sample(&mut out, "nv_cpu_utilization", &[], 0.25);
    sample(&mut out, "nv_inference_count", &[("model", "sim\"ple"), ("version", "2")], 6u64);
    sample(&mut out, format_args!("{}_sum", "x"), &[("le", "+Inf")], -1i64);
    assert_eq!(
        out,
        "nv_cpu_utilization 0.25\n\
             nv_inference_count{model=\"sim\\\"ple\",version=\"2\"} 6\n\
             x_sum{le=\"+Inf\"} -1\n"
    );
}

#[test]
fn values_keep_their_display_form() {
    let mut out = String::new();
    for v in [1.0, 1.5, 1e-7, 1e21, 0.1 + 0.2, f64::NAN] {
        sample(&mut out, "f", &[], v);
    }
    sample(&mut out, "u", &[], u64::MAX);
    assert_eq!(
        out,
        "f 1\nf 1.5\nf 0.0000001\nf 1000000000000000000000\nf 0.30000000000000004\nf NaN\n\
             u 18446744073709551615\n"
    );
}

#[test]
fn histograms_are_cumulative_with_le_last() {
    let mut out = String::new();
    histogram(&mut out, "lat", &[("model", "a")], [(0.5, 1), (1.0, 0), (10.0, 2)], 12.5, 4);
    histogram(&mut out, "empty", &[], [], 0, 0);
    assert_eq!(
        out,
        "lat_bucket{model=\"a\",le=\"0.5\"} 1\n\
             lat_bucket{model=\"a\",le=\"1\"} 1\n\
             lat_bucket{model=\"a\",le=\"10\"} 3\n\
             lat_bucket{model=\"a\",le=\"+Inf\"} 4\n\
             lat_sum{model=\"a\"} 12.5\n\
             lat_count{model=\"a\"} 4\n\
             empty_bucket{le=\"+Inf\"} 0\n\
             empty_sum 0\n\
             empty_count 0\n"
    );
}
