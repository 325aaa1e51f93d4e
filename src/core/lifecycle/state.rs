//! The lifecycle's records: a version's state as the index shows it, a loaded version, and what the
//! table keeps per model name and per version.

use crate::core::scheduler::Scheduler;
use crate::core::stats::ModelStats;
use crate::core::validate::ModelIo;
use crate::error::Result;
use crate::proto::inference::ModelConfig;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A model version's state, as the repository index reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelState {
    Loading,
    Ready,
    Unloading,
    Unavailable,
}

impl ModelState {
    pub fn as_str(self) -> &'static str {
        match self {
            ModelState::Loading => "LOADING",
            ModelState::Ready => "READY",
            ModelState::Unloading => "UNLOADING",
            ModelState::Unavailable => "UNAVAILABLE",
        }
    }
}

/// A model version that is loaded and serving.
pub struct LoadedModel {
    pub name: String,
    pub version: i64,
    pub config: Arc<ModelConfig>,
    pub io: ModelIo,
    /// Labels per output name, from `label_filename`.
    pub labels: HashMap<String, Arc<Vec<String>>>,
    pub scheduler: Box<dyn Scheduler>,
    pub stats: Arc<ModelStats>,
    /// How long the load took.
    pub load_duration: Duration,
    /// Instances that can stop being ready while loaded (see [`crate::model_api::Readiness`]).
    pub probes: Vec<Arc<dyn crate::model_api::Readiness>>,
    /// The backend library serving the model, when it is not one built into tritonrs.
    pub served_by: Option<String>,
    /// Instances to tell when this version leaves service (see [`crate::model_api::Retirement`]).
    pub retirements: Vec<Arc<dyn crate::model_api::Retirement>>,
    /// The model folder the version was loaded from: files beside its configuration (a tokenizer's
    /// `tokenizer_config.json`) live there.
    pub folder: Option<std::path::PathBuf>,
}

impl LoadedModel {
    /// A loaded version: fresh statistics, the scheduler `start` builds over them, and the load's
    /// duration from `started`. Instance readiness, the serving library and retirements are the
    /// caller's to add (an ensemble has none).
    pub(super) fn assemble(
        name: &str,
        version: i64,
        config: Arc<ModelConfig>,
        io: ModelIo,
        labels: &HashMap<String, Arc<Vec<String>>>,
        started: Instant,
        start: impl FnOnce(&ModelConfig, Arc<ModelStats>) -> Result<Box<dyn Scheduler>>,
    ) -> Result<LoadedModel> {
        let mut stats = ModelStats::new(config.max_batch_size);
        if config.model_transaction_policy.as_ref().is_some_and(|p| p.decoupled) {
            stats = stats.with_first_response_histogram(&first_response_buckets(&config)).with_response_stats();
        }
        let stats = Arc::new(stats);
        let scheduler = start(&config, stats.clone())?;
        Ok(LoadedModel {
            name: name.to_string(),
            version,
            io,
            labels: labels.clone(),
            config,
            scheduler,
            stats,
            load_duration: started.elapsed(),
            probes: Vec::new(),
            served_by: None,
            retirements: Vec::new(),
            folder: None,
        })
    }
}

/// One version's slot in the table.
#[derive(Clone)]
pub(super) struct VersionSlot {
    pub(super) state: ModelState,
    pub(super) reason: String,
    /// The serving model; kept while a replacement loads, so serving never stops.
    pub(super) model: Option<Arc<LoadedModel>>,
    /// Whether the version policy (still) selects this version; retired and unloaded versions are not
    /// counted by strict readiness.
    pub(super) wanted: bool,
}

impl VersionSlot {
    pub(super) fn loading() -> Self {
        VersionSlot { state: ModelState::Loading, reason: String::new(), model: None, wanted: true }
    }
}

/// Everything known about one model name.
#[derive(Default)]
pub(super) struct ModelEntry {
    pub(super) versions: BTreeMap<i64, VersionSlot>,
    /// A failure that concerns the whole model (bad config, duplicate name), with no version.
    pub(super) error: Option<String>,
    /// The folder fingerprint at the last load, for poll mode.
    pub(super) fingerprint: Option<u64>,
    /// Set while a load of this model runs (shown as LOADING before its versions are known).
    pub(super) loading: bool,
    /// Set by an explicit unload: the model is UNAVAILABLE on purpose and does not count for readiness.
    pub(super) unloaded: bool,
    /// Holds model files given through the load API until the model is replaced or unloaded.
    pub(super) _files: Option<Arc<tempfile::TempDir>>,
    /// The load API's `config` parameter of the last load that served (without files): a later load
    /// without one reuses it while the model stays loaded, as tritonserver 2.51 does; an explicit
    /// unload forgets it, so the next load reads `config.pbtxt`.
    pub(super) config_override: Option<String>,
    /// For an ensemble, its composing models (from the last configuration read); empty otherwise.
    pub(super) composing: BTreeSet<String>,
    /// The composing models an ensemble is down for: it loads again as soon as one of them serves
    /// (Triton reloads dependents the same way).
    pub(super) awaiting_composing: BTreeSet<String>,
    /// The model's repository agents after their LOAD, until the model is unloaded.
    pub(super) agents: Option<Box<dyn crate::model_api::agents::AgentChain>>,
    /// Increases with every version swapped in, across all models: an ensemble older than its
    /// composing model was checked against that model's previous configuration.
    pub(super) generation: u64,
}

/// One row of the repository index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexEntry {
    pub name: String,
    pub version: Option<i64>,
    pub state: Option<ModelState>,
    pub reason: String,
}

/// The first-response histogram's bounds: the model's `model_metrics` override for
/// `nv_inference_first_response_histogram_ms`, else tritonserver's defaults.
fn first_response_buckets(config: &ModelConfig) -> Vec<f64> {
    use crate::proto::inference::model_metrics::metric_control::MetricOptions;
    let family = crate::metrics_text::names::FIRST_RESPONSE_HISTOGRAM.name;
    config
        .model_metrics
        .iter()
        .flat_map(|m| &m.metric_control)
        .filter(|c| c.metric_identifier.as_ref().is_some_and(|i| i.family == family))
        .find_map(|c| c.metric_options.as_ref().map(|MetricOptions::HistogramOptions(h)| h.buckets.clone()))
        .unwrap_or_else(|| crate::core::stats::FIRST_RESPONSE_BUCKETS_MS.to_vec())
}
