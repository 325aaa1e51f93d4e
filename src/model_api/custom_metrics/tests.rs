//! Unit tests of `model_api/custom_metrics.rs`.

use super::*;

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

#[test]
fn counters_gauges_and_histograms_render_as_prometheus_text() {
    let m = CustomMetrics::new();
    let c = m.family("requests_total", "Requests seen", MetricKind::Counter).unwrap();
    let g = m.family("temperature", "Degrees", MetricKind::Gauge).unwrap();
    let h = m.family("latency", "Seconds", MetricKind::Histogram).unwrap();
    let c1 = m.metric(c, labels(&[("model", "a")]), None).unwrap();
    let g1 = m.metric(g, Labels::new(), None).unwrap();
    let h1 = m.metric(h, labels(&[("model", "a\"b")]), Some(vec![1.0, 0.5])).unwrap();
    m.update(c1, MetricOp::Increment(2.0)).unwrap();
    m.update(g1, MetricOp::Set(-3.5)).unwrap();
    for v in [0.2, 0.7, 9.0] {
        m.update(h1, MetricOp::Observe(v)).unwrap();
    }
    assert!(m.update(c1, MetricOp::Increment(-1.0)).is_err());
    assert!(m.update(c1, MetricOp::Set(1.0)).is_err());
    assert_eq!(m.value(c1).unwrap(), 2.0);
    let mut out = String::new();
    m.render(&mut out);
    for line in [
        "# TYPE requests_total counter",
        "requests_total{model=\"a\"} 2",
        "temperature -3.5",
        "latency_bucket{model=\"a\\\"b\",le=\"0.5\"} 1",
        "latency_bucket{model=\"a\\\"b\",le=\"1\"} 2",
        "latency_bucket{model=\"a\\\"b\",le=\"+Inf\"} 3",
        "latency_count{model=\"a\\\"b\"} 3",
    ] {
        assert!(out.lines().any(|l| l == line), "missing {line:?} in:\n{out}");
    }
}

#[test]
fn handles_share_families_and_metrics_until_the_last_goes() {
    let m = CustomMetrics::new();
    let f1 = m.family("x", "", MetricKind::Counter).unwrap();
    let f2 = m.family("x", "", MetricKind::Counter).unwrap();
    assert!(m.family("x", "", MetricKind::Gauge).is_err());
    assert!(m.family("9bad", "", MetricKind::Gauge).is_err());
    let a = m.metric(f1, labels(&[("k", "v")]), None).unwrap();
    let b = m.metric(f2, labels(&[("k", "v")]), None).unwrap();
    m.update(a, MetricOp::Increment(1.0)).unwrap();
    assert_eq!(m.value(b).unwrap(), 1.0, "the same metric");
    assert!(m.metric(f1, Labels::new(), Some(vec![1.0])).is_err(), "buckets on a counter");
    m.release(a);
    m.release(f1);
    assert_eq!(m.value(b).unwrap(), 1.0);
    m.release(b);
    m.release(f2);
    let mut out = String::new();
    m.render(&mut out);
    assert!(out.is_empty(), "{out}");
    assert!(m.value(b).is_err());
}
