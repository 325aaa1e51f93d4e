//! Metadata and statistics: server and model metadata, model readiness and configuration,
//! statistics per version, labels and trace settings.

use super::handle::{parse_version, Server};
use crate::core::lifecycle::LoadedModel;
use crate::core::stats::{FailureReason, StatsSnapshot};
use crate::core::trace::{TraceSettings, TraceUpdate};
use crate::core::validate;
use crate::error::Result;
use crate::proto::inference::ModelConfig;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// The protocol extensions this server implements, as listed in server metadata.
pub const EXTENSIONS: &[&str] = &[
    "classification",
    "sequence",
    "model_repository",
    "model_configuration",
    "system_shared_memory",
    "cuda_shared_memory",
    "binary_tensor_data",
    "parameters",
    "statistics",
    "trace",
    "logging",
];

pub struct ServerMetadata {
    pub name: String,
    pub version: String,
    pub extensions: Vec<String>,
}

pub struct TensorMetadata {
    pub name: String,
    pub datatype: String,
    pub shape: Vec<i64>,
}

pub struct ModelMetadata {
    pub name: String,
    pub versions: Vec<String>,
    pub platform: String,
    pub inputs: Vec<TensorMetadata>,
    pub outputs: Vec<TensorMetadata>,
}

/// Statistics of one model version.
pub struct ModelStatistics {
    pub name: String,
    pub version: i64,
    pub stats: StatsSnapshot,
    /// Failures per reason, in [`FailureReason::ALL`] order.
    pub failures: Vec<(FailureReason, u64)>,
    /// Requests queued and not yet executing.
    pub pending: i64,
    /// How long the version took to load.
    pub load_duration: Duration,
    /// Whether requests to this version go through the response cache.
    pub cache_enabled: bool,
    /// The latency summaries in [`crate::core::stats::Stage`] order, with `summary_latencies=true`.
    pub summaries: Option<Vec<crate::core::stats::SummarySnapshot>>,
    /// The first-response histogram of a decoupled model, with `histogram_latencies=true`.
    pub first_response: Option<crate::core::stats::HistogramSnapshot>,
}

impl Server {
    pub fn metadata(&self) -> ServerMetadata {
        ServerMetadata {
            name: self.inner.opts.id.clone(),
            version: env!("CARGO_PKG_VERSION").to_string(),
            extensions: EXTENSIONS.iter().map(|s| s.to_string()).collect(),
        }
    }

    /// Whether a model (version) is ready: loaded, and every instance that can tell (a Python stub, and
    /// the model's own `is_model_ready`) says it can serve.
    pub async fn model_ready(&self, name: &str, version: &str) -> Result<bool> {
        let version = parse_version(version)?;
        if !self.inner.models.is_ready(name, version)? {
            return Ok(false);
        }
        let Ok(model) = self.inner.models.get(name, version) else { return Ok(false) };
        if model.probes.is_empty() {
            return Ok(true);
        }
        let probes = model.probes.clone();
        // A probe may ask a process, so it runs off the runtime's workers.
        Ok(tokio::task::spawn_blocking(move || probes.iter().all(|p| p.ready())).await.unwrap_or(false))
    }

    fn model(&self, name: &str, version: &str) -> Result<Arc<LoadedModel>> {
        self.inner.models.get(name, parse_version(version)?)
    }

    pub fn model_metadata(&self, name: &str, version: &str) -> Result<ModelMetadata> {
        let m = self.model(name, version)?;
        let versions = self.inner.models.ready_versions(name).iter().map(i64::to_string).collect();
        let batch: Vec<i64> = if m.io.max_batch_size > 0 { vec![-1] } else { Vec::new() };
        let meta = |specs: &[validate::TensorSpec]| {
            specs
                .iter()
                .map(|s| TensorMetadata {
                    name: s.name.clone(),
                    datatype: s.datatype.as_str().to_string(),
                    shape: batch.iter().chain(s.dims.iter()).copied().collect(),
                })
                .collect()
        };
        Ok(ModelMetadata {
            name: m.name.clone(),
            versions,
            platform: if m.config.platform.is_empty() { m.config.backend.clone() } else { m.config.platform.clone() },
            inputs: meta(&m.io.inputs),
            outputs: meta(&m.io.outputs),
        })
    }

    pub fn model_config(&self, name: &str, version: &str) -> Result<Arc<ModelConfig>> {
        Ok(self.model(name, version)?.config.clone())
    }

    /// A serving version's configuration and the model folder it was loaded from (where files beside
    /// the configuration live, such as a tokenizer's); `None` picks the highest serving version. A new
    /// load of the model gives a new configuration `Arc`, so callers may cache what they read by it.
    pub fn model_folder(&self, name: &str, version: Option<i64>) -> Result<(Arc<ModelConfig>, Option<PathBuf>)> {
        let m = self.inner.models.get(name, version)?;
        Ok((m.config.clone(), m.folder.clone()))
    }

    /// The trace settings of a model (ready, as in tritonserver), or the global ones.
    pub fn trace_settings(&self, model: Option<&str>) -> Result<TraceSettings> {
        if let Some(name) = model {
            self.inner.models.get(name, None)?;
        }
        Ok(self.inner.tracer.settings(model))
    }

    /// Updates a model's trace settings (it must be ready, as in tritonserver) or the global ones, and
    /// returns the settings now in force.
    pub fn update_trace_settings(&self, model: Option<&str>, update: &TraceUpdate) -> Result<TraceSettings> {
        if let Some(name) = model {
            self.inner.models.get(name, None)?;
        }
        self.inner.tracer.update(model, update)
    }

    /// Statistics for every loaded version, or for one model (and version).
    pub fn statistics(&self, name: Option<&str>, version: &str) -> Result<Vec<ModelStatistics>> {
        let version = parse_version(version)?;
        let loaded = self.inner.models.loaded();
        let snap = |m: &Arc<LoadedModel>| ModelStatistics {
            name: m.name.clone(),
            version: m.version,
            stats: m.stats.snapshot(),
            failures: FailureReason::ALL.iter().map(|&r| (r, m.stats.failures(r))).collect(),
            pending: m.stats.pending.load(Ordering::Relaxed),
            load_duration: m.load_duration,
            cache_enabled: self.cache_enabled(m),
            summaries: m.stats.summaries.as_ref().map(|s| s.snapshot()),
            first_response: m.stats.first_response.as_ref().map(|h| h.snapshot()),
        };
        match name {
            None => Ok(loaded.iter().map(snap).collect()),
            Some(n) => {
                // Unknown models and versions are errors, as in Triton.
                self.inner.models.get(n, version)?;
                Ok(loaded.iter().filter(|m| m.name == n && version.is_none_or(|v| v == m.version)).map(snap).collect())
            }
        }
    }

    /// The labels of a model output's `label_filename`, if it has one.
    pub fn model_labels(&self, name: &str, version: Option<i64>, output: &str) -> Option<Arc<Vec<String>>> {
        self.inner.models.get(name, version).ok()?.labels.get(output).cloned()
    }
}
