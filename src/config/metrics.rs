//! `--metrics-config=<setting>=<value>`, tritonserver's metrics settings: 2.51's `counter_latencies`,
//! `summary_latencies` and `summary_quantiles`, and later releases' `histogram_latencies` (the
//! first-response histogram of decoupled models). As in tritonserver, a setting without `=` stops the
//! start, a quantile pair it cannot read is logged and skipped, and an unknown setting is accepted;
//! tritonrs says in its log that it is ignored instead of ignoring it silently.

use crate::core::stats::quantiles::Target;
use crate::core::stats::{LatencyMetrics, DEFAULT_QUANTILES};
use clap::Args;

#[derive(Debug, Clone, Default, Args)]
pub struct MetricsConfigArgs {
    /// A metrics setting, as <setting>=<value> (repeatable; in the variable, separated by `;`):
    /// summary_latencies=true adds the nv_inference_*_summary_us summaries, summary_quantiles=
    /// <quantile>:<error>,... their quantiles (default 0.5:0.05,0.9:0.01,0.95:0.001,0.99:0.001,
    /// 0.999:0.001), counter_latencies=false drops the nv_inference_*_duration_us counters,
    /// histogram_latencies=true adds nv_inference_first_response_histogram_ms (decoupled models).
    #[arg(long, env = "TRITONRS_METRICS_CONFIG", value_name = "SETTING=VALUE", value_delimiter = ';',
          value_parser = parse_setting, help_heading = "Metrics")]
    pub metrics_config: Vec<(String, String)>,
}

/// Splits `<setting>=<value>` at the first `=`, with tritonserver's message when there is none.
fn parse_setting(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) => Ok((k.to_string(), v.to_string())),
        None => Err(format!("--metrics-config option format is <setting>=<value>. Got {s}")),
    }
}

impl MetricsConfigArgs {
    /// The latency settings, and a sentence for the log about each setting or value that changes
    /// nothing (tritonserver takes only `true` or `false` for the booleans, exactly).
    pub fn latency(&self) -> (LatencyMetrics, Vec<String>) {
        let mut m = LatencyMetrics::default();
        let mut notes = Vec::new();
        let boolean = |name: &str, v: &str, notes: &mut Vec<String>| match v {
            "true" => Some(true),
            "false" => Some(false),
            _ => {
                notes.push(format!(
                    "The metrics setting {name}={v} is ignored: tritonserver takes only 'true' or 'false' there."
                ));
                None
            }
        };
        for (k, v) in &self.metrics_config {
            match k.as_str() {
                "counter_latencies" => m.counters = boolean(k, v, &mut notes).unwrap_or(m.counters),
                "summary_latencies" => m.summaries = boolean(k, v, &mut notes).unwrap_or(m.summaries),
                "histogram_latencies" => m.histograms = boolean(k, v, &mut notes).unwrap_or(m.histograms),
                "summary_quantiles" => {
                    let q = parse_quantiles(v, &mut notes);
                    if !q.is_empty() {
                        m.quantiles = q;
                    }
                }
                _ => notes.push(format!(
                    "The metrics setting '{k}' is ignored: tritonserver has no such setting (it has \
                     counter_latencies, summary_latencies, summary_quantiles and histogram_latencies)."
                )),
            }
        }
        (m, notes)
    }
}

/// Reads `<quantile>:<error>,...`; a pair it cannot read is reported and skipped, as tritonserver
/// does. No pair read leaves the defaults.
fn parse_quantiles(v: &str, notes: &mut Vec<String>) -> Vec<Target> {
    let mut out = Vec::new();
    for pair in v.split(',') {
        let Some((q, e)) = pair.split_once(':') else {
            notes.push(format!(
                "The summary quantile '{pair}' is ignored: it has no ':'; the format is <quantile>:<error>."
            ));
            continue;
        };
        match (q.trim().parse::<f64>(), e.trim().parse::<f64>()) {
            (Ok(quantile), Ok(error))
                if (0.0..=1.0).contains(&quantile) && (0.0..=1.0).contains(&error) && error.is_finite() =>
            {
                out.push(Target { quantile, error })
            }
            _ => notes.push(format!(
                "The summary quantile '{pair}' is ignored: the quantile and its error must be numbers from 0 to 1."
            )),
        }
    }
    if out.is_empty() && !v.is_empty() {
        notes.push(format!(
            "No summary quantile could be read from '{v}'; the defaults ({}) are used.",
            DEFAULT_QUANTILES.iter().map(|t| format!("{}:{}", t.quantile, t.error)).collect::<Vec<_>>().join(",")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(settings: &[&str]) -> MetricsConfigArgs {
        MetricsConfigArgs { metrics_config: settings.iter().map(|s| parse_setting(s).unwrap()).collect() }
    }

    #[test]
    fn settings_as_tritonserver_reads_them() {
        let (m, notes) = args(&[]).latency();
        assert_eq!(m, LatencyMetrics::default());
        assert!(notes.is_empty());
        let (m, notes) =
            args(&["summary_latencies=true", "counter_latencies=false", "summary_quantiles=0.5:0.05,0.99:0.001"])
                .latency();
        assert!(m.summaries && !m.counters);
        assert_eq!(m.quantiles, [Target { quantile: 0.5, error: 0.05 }, Target { quantile: 0.99, error: 0.001 }]);
        assert!(notes.is_empty(), "{notes:?}");
    }

    #[test]
    fn what_changes_nothing_is_said() {
        let (m, notes) =
            args(&["summary_latencies=1", "no_such_setting=true", "summary_quantiles=abc,0.9:x"]).latency();
        assert_eq!(m, LatencyMetrics::default());
        assert_eq!(notes.len(), 5, "{notes:?}");
        assert!(notes[1].contains("no_such_setting"));
        let (m, notes) = args(&["histogram_latencies=true"]).latency();
        assert!(m.histograms && notes.is_empty(), "{notes:?}");
        assert!(parse_setting("summary_latencies").unwrap_err().contains("option format is <setting>=<value>"));
    }
}
