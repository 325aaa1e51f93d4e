//! Custom metrics that models create at run time (Python's `pb_utils.MetricFamily` / `Metric`), exported
//! on `/metrics` after Triton's own.
//!
//! Models hold handles: creating a family or metric that already exists (same name and kind; same
//! labels) returns a new handle to the same one, as Triton's Prometheus registry does, so every instance
//! of a model can create its families in `initialize`. A family or metric disappears with its last
//! handle.

use crate::error::{Error, ErrorKind, Result};
use crate::metrics_text::{header, histogram, sample, Kind};
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};

/// A metric family's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    Counter,
    Gauge,
    Histogram,
}

impl MetricKind {
    /// Its `# TYPE` on `/metrics`.
    fn text_kind(self) -> Kind {
        match self {
            MetricKind::Counter => Kind::Counter,
            MetricKind::Gauge => Kind::Gauge,
            MetricKind::Histogram => Kind::Histogram,
        }
    }

    fn as_str(self) -> &'static str {
        self.text_kind().as_str()
    }
}

/// What a model does to a metric.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum MetricOp {
    Increment(f64),
    Set(f64),
    Observe(f64),
}

/// Labels, sorted by name.
type Labels = BTreeMap<String, String>;

/// One labelled metric.
#[derive(Debug, Default)]
struct Metric {
    /// Counter or gauge value; a histogram's sum.
    value: f64,
    /// A histogram's bucket upper bounds, ascending.
    buckets: Vec<f64>,
    /// Per bucket, the observations at most its bound (not cumulative).
    counts: Vec<u64>,
    /// A histogram's observation count.
    count: u64,
    /// Handles that point at this metric.
    handles: usize,
}

/// A family: name, help, kind and its metrics.
#[derive(Debug)]
struct Family {
    description: String,
    kind: MetricKind,
    metrics: BTreeMap<Labels, Metric>,
    /// Handles that point at this family.
    handles: usize,
}

/// What a handle points at.
#[derive(Debug, Clone)]
enum Handle {
    Family(String),
    Metric(String, Labels),
}

#[derive(Debug, Default)]
struct Registry {
    families: BTreeMap<String, Family>,
    handles: HashMap<u64, Handle>,
    next: u64,
}

/// The server's custom metrics.
#[derive(Debug, Default)]
pub struct CustomMetrics {
    inner: Mutex<Registry>,
}

/// Prometheus metric and label names: `[a-zA-Z_:][a-zA-Z0-9_:]*` (no colon in labels).
fn valid_name(name: &str, colon: bool) -> bool {
    let ok = |c: char, first: bool| {
        c.is_ascii_alphabetic() || c == '_' || (colon && c == ':') || (!first && c.is_ascii_digit())
    };
    let mut chars = name.chars();
    chars.next().is_some_and(|c| ok(c, true)) && chars.all(|c| ok(c, false))
}

impl CustomMetrics {
    pub fn new() -> Self {
        Self::default()
    }

    /// A handle to the family `name` (created if new).
    pub fn family(&self, name: &str, description: &str, kind: MetricKind) -> Result<u64> {
        if !valid_name(name, true) {
            return Err(Error::invalid(format!("'{name}' is not a valid metric name")));
        }
        let mut r = self.inner.lock();
        match r.families.get_mut(name) {
            Some(f) if f.kind != kind => {
                return Err(Error::new(
                    ErrorKind::AlreadyExists,
                    format!("metric family '{name}' already exists as a {}", f.kind.as_str()),
                ))
            }
            Some(f) => f.handles += 1,
            None => {
                let family =
                    Family { description: description.to_string(), kind, metrics: BTreeMap::new(), handles: 1 };
                r.families.insert(name.to_string(), family);
            }
        }
        r.next += 1;
        let id = r.next;
        r.handles.insert(id, Handle::Family(name.to_string()));
        Ok(id)
    }

    /// A handle to the metric of `family` with these labels (created if new). Histograms need their
    /// bucket bounds, the others must have none.
    pub fn metric(&self, family: u64, labels: Labels, buckets: Option<Vec<f64>>) -> Result<u64> {
        if let Some(bad) = labels.keys().find(|k| !valid_name(k, false)) {
            return Err(Error::invalid(format!("'{bad}' is not a valid label name")));
        }
        let mut r = self.inner.lock();
        let Some(Handle::Family(name)) = r.handles.get(&family).cloned() else {
            return Err(Error::invalid(
                "Invalid metric operation as the corresponding 'MetricFamily' has been deleted.",
            ));
        };
        let f =
            r.families.get_mut(&name).ok_or_else(|| Error::internal("a metric family handle outlived its family"))?;
        let buckets = match (f.kind, buckets) {
            (MetricKind::Histogram, Some(mut b)) => {
                if b.iter().any(|x| !x.is_finite()) {
                    return Err(Error::invalid("histogram buckets must be finite numbers"));
                }
                b.sort_by(f64::total_cmp);
                b.dedup();
                b
            }
            (MetricKind::Histogram, None) => {
                return Err(Error::invalid("Failed to create metric. Missing required buckets."))
            }
            (_, Some(_)) => return Err(Error::invalid("Failed to create metric. Unexpected buckets found.")),
            (_, None) => Vec::new(),
        };
        let m = f.metrics.entry(labels.clone()).or_insert_with(|| Metric {
            counts: vec![0; buckets.len()],
            buckets,
            ..Default::default()
        });
        m.handles += 1;
        r.next += 1;
        let id = r.next;
        r.handles.insert(id, Handle::Metric(name, labels));
        Ok(id)
    }

    /// Drops a handle; a family or metric goes away with its last one.
    pub fn release(&self, id: u64) {
        let mut r = self.inner.lock();
        match r.handles.remove(&id) {
            Some(Handle::Family(name)) => {
                if let Some(f) = r.families.get_mut(&name) {
                    f.handles = f.handles.saturating_sub(1);
                    if f.handles == 0 && f.metrics.is_empty() {
                        r.families.remove(&name);
                    }
                }
            }
            Some(Handle::Metric(name, labels)) => {
                if let Some(f) = r.families.get_mut(&name) {
                    if let Some(m) = f.metrics.get_mut(&labels) {
                        m.handles = m.handles.saturating_sub(1);
                        if m.handles == 0 {
                            f.metrics.remove(&labels);
                        }
                    }
                    if f.handles == 0 && f.metrics.is_empty() {
                        r.families.remove(&name);
                    }
                }
            }
            None => {}
        }
    }

    fn with_metric<T>(&self, id: u64, f: impl FnOnce(MetricKind, &mut Metric) -> Result<T>) -> Result<T> {
        let mut r = self.inner.lock();
        let Some(Handle::Metric(name, labels)) = r.handles.get(&id).cloned() else {
            return Err(Error::invalid("the metric has been deleted"));
        };
        let family = r.families.get_mut(&name).ok_or_else(|| Error::internal("a metric handle outlived its family"))?;
        let kind = family.kind;
        let m =
            family.metrics.get_mut(&labels).ok_or_else(|| Error::internal("a metric handle outlived its metric"))?;
        f(kind, m)
    }

    /// Changes a metric: counters only go up, gauges are set or moved, histograms observe.
    pub fn update(&self, id: u64, op: MetricOp) -> Result<()> {
        self.with_metric(id, |kind, m| {
            match (kind, op) {
                (MetricKind::Counter, MetricOp::Increment(v)) if v >= 0.0 => m.value += v,
                (MetricKind::Counter, MetricOp::Increment(_)) => {
                    return Err(Error::invalid("Failed to increment metric value: a counter cannot decrease"))
                }
                (MetricKind::Gauge, MetricOp::Increment(v)) => m.value += v,
                (MetricKind::Gauge, MetricOp::Set(v)) => m.value = v,
                (MetricKind::Histogram, MetricOp::Observe(v)) => {
                    m.value += v;
                    m.count += 1;
                    if let Some(i) = m.buckets.iter().position(|&b| v <= b) {
                        m.counts[i] += 1;
                    }
                }
                (kind, op) => {
                    return Err(Error::invalid(format!("{op:?} is not possible on a {} metric", kind.as_str())))
                }
            }
            Ok(())
        })
    }

    /// A counter's or gauge's value, a histogram's sum.
    pub fn value(&self, id: u64) -> Result<f64> {
        self.with_metric(id, |_, m| Ok(m.value))
    }

    /// Appends every family in the Prometheus text format.
    pub fn render(&self, out: &mut String) {
        let r = self.inner.lock();
        for (name, f) in &r.families {
            if f.metrics.is_empty() {
                continue;
            }
            header(out, name, &f.description, f.kind.text_kind());
            for (labels, m) in &f.metrics {
                let labels: Vec<(&str, &str)> = labels.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
                if f.kind == MetricKind::Histogram {
                    let buckets = m.buckets.iter().copied().zip(m.counts.iter().copied());
                    histogram(out, name, &labels, buckets, m.value, m.count);
                } else {
                    sample(out, name, &labels, m.value);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
