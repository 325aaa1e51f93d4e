//! The Prometheus text exposition format (0.0.4) that `/metrics` serves: one writer for every family
//! the server exports (the core's `nv_*` statistics, memory pools, GPU readings, models' custom
//! metrics, the MQTT bridge) and one label-value escape. It imports nothing from the crate, so any
//! module may use it, `platform` included.
//!
//! No crate writes these bytes. `prometheus` 0.14's `TextEncoder` would change the scrape: its registry
//! emits families sorted by name and samples sorted by label values, it sorts label pairs by name
//! (Triton's `reason` label would move before `version`), it leaves out `# HELP` when the help text is
//! empty, and it writes every value as an f64 (integers past 2^53 lose digits). `prometheus-client`
//! writes OpenMetrics and renames counters with `_total`. Values here are written with Rust's
//! `Display`, as before: integers as integers, floats in their shortest exact decimal, never in
//! exponent notation. Every family's name, help text and type is in [`names`].

use std::borrow::Cow;
use std::fmt::{Display, Write};

pub mod names;

/// The `Content-Type` of a scrape.
pub const MEDIA_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A family's `# TYPE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
    Summary,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
            Kind::Summary => "summary",
        }
    }
}

/// Escapes a label value: backslash, double quote and line feed, as the format requires.
pub fn escape_label_value(v: &str) -> Cow<'_, str> {
    if !v.contains(['\\', '"', '\n']) {
        return Cow::Borrowed(v);
    }
    let mut s = String::with_capacity(v.len() + 8);
    for c in v.chars() {
        match c {
            '\\' => s.push_str("\\\\"),
            '"' => s.push_str("\\\""),
            '\n' => s.push_str("\\n"),
            c => s.push(c),
        }
    }
    Cow::Owned(s)
}

/// Writes a family's `# HELP` and `# TYPE` lines. A line feed in `help` (a model's description)
/// becomes a space; the rest of it is written as it is.
pub fn header(out: &mut String, name: &str, help: &str, kind: Kind) {
    let help = if help.contains('\n') { Cow::Owned(help.replace('\n', " ")) } else { Cow::Borrowed(help) };
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {}", kind.as_str());
}

/// Writes one sample: `name{label="value",...} value`, without braces when there are no labels.
/// Label values are escaped; labels keep the order given.
pub fn sample(out: &mut String, name: impl Display, labels: &[(&str, &str)], value: impl Display) {
    let _ = write!(out, "{name}");
    for (i, (label, v)) in labels.iter().enumerate() {
        out.push(if i == 0 { '{' } else { ',' });
        let _ = write!(out, "{label}=\"{}\"", escape_label_value(v));
    }
    if !labels.is_empty() {
        out.push('}');
    }
    let _ = writeln!(out, " {value}");
}

/// Writes a histogram's samples: a cumulative `_bucket` per upper bound (`le`, after `labels`), the
/// `+Inf` bucket (`count`), `_sum` and `_count`. `buckets` gives each bound with the observations that
/// fell in it alone (not cumulative), in ascending order.
pub fn histogram(
    out: &mut String,
    name: &str,
    labels: &[(&str, &str)],
    buckets: impl IntoIterator<Item = (f64, u64)>,
    sum: impl Display,
    count: u64,
) {
    let bucket = format!("{name}_bucket");
    let with_le = |le: &str, out: &mut String, n: u64| {
        let mut all = labels.to_vec();
        all.push(("le", le));
        sample(out, &bucket, &all, n);
    };
    let mut cumulative = 0;
    for (bound, n) in buckets {
        cumulative += n;
        with_le(&bound.to_string(), out, cumulative);
    }
    with_le("+Inf", out, count);
    sample(out, format_args!("{name}_sum"), labels, sum);
    sample(out, format_args!("{name}_count"), labels, count);
}

/// Writes a summary's samples in tritonserver's order: `_count`, `_sum`, then a sample per quantile
/// with the `quantile` label after `labels`. A quantile with no observation in its window is NaN,
/// written `Nan` as prometheus-cpp writes it (Prometheus reads either).
pub fn summary(
    out: &mut String,
    name: &str,
    labels: &[(&str, &str)],
    count: u64,
    sum: impl Display,
    quantiles: &[(f64, f64)],
) {
    sample(out, format_args!("{name}_count"), labels, count);
    sample(out, format_args!("{name}_sum"), labels, sum);
    for (q, v) in quantiles {
        let q = q.to_string();
        let mut all = labels.to_vec();
        all.push(("quantile", &q));
        if v.is_nan() {
            sample(out, name, &all, "Nan");
        } else {
            sample(out, name, &all, v);
        }
    }
}

/// Upper bounds of [`SecondsHistogram`]'s buckets, in seconds.
pub const SECONDS_BUCKETS: [f64; 12] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0];

/// A lock-free histogram of durations in seconds (a front-end's request times), written by the
/// front-end and read at scrape time.
#[derive(Debug, Default)]
pub struct SecondsHistogram {
    buckets: [std::sync::atomic::AtomicU64; SECONDS_BUCKETS.len()],
    count: std::sync::atomic::AtomicU64,
    sum_us: std::sync::atomic::AtomicU64,
}

impl SecondsHistogram {
    pub fn observe(&self, secs: f64) {
        use std::sync::atomic::Ordering::Relaxed;
        if let Some(i) = SECONDS_BUCKETS.iter().position(|&b| secs <= b) {
            self.buckets[i].fetch_add(1, Relaxed);
        }
        self.count.fetch_add(1, Relaxed);
        self.sum_us.fetch_add((secs * 1e6) as u64, Relaxed);
    }

    /// Writes the samples (the family's header is the caller's).
    pub fn render(&self, out: &mut String, name: &str, labels: &[(&str, &str)]) {
        use std::sync::atomic::Ordering::Relaxed;
        // Read as `observe` writes them: buckets, then the count, then the sum.
        let buckets: Vec<(f64, u64)> =
            SECONDS_BUCKETS.iter().zip(&self.buckets).map(|(b, n)| (*b, n.load(Relaxed))).collect();
        let count = self.count.load(Relaxed);
        let sum = self.sum_us.load(Relaxed) as f64 / 1e6;
        histogram(out, name, labels, buckets, sum, count);
    }
}

#[cfg(test)]
mod tests;
