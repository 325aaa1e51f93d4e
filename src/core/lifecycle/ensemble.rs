//! Ensembles in the model lifecycle: an ensemble loads once its composing models serve (loading them
//! when the control mode allows, as Triton does), is checked against their configurations, stops
//! serving when one of them stops, and loads again when it is back.

use super::manager::ModelManager;
use super::state::LoadedModel;
use crate::core::repository;
use crate::core::scheduler::ensemble::graph::{EnsembleGraph, Step};
use crate::core::scheduler::ensemble::{EnsembleScheduler, StepModel, StepRunner};
use crate::core::validate::ModelIo;
use crate::error::{Error, Result};
use crate::model_api::LoadOptions;
use crate::proto::inference::ModelConfig;
use std::collections::HashMap;
use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

/// What an ensemble's versions are built from, prepared once per load.
pub(super) struct EnsemblePlan {
    /// The ensemble's data flow.
    graph: EnsembleGraph,
    /// Per step, its composing model's shape facts.
    models: Vec<StepModel>,
    /// Whether a step is decoupled, which makes the ensemble decoupled: Triton fills in its
    /// `model_transaction_policy` so, whatever the configuration says.
    decoupled: bool,
}

/// A boxed load or unload, so that loads of ensembles and of their composing models can call each
/// other without an infinitely sized future.
type Boxed<'a> = Pin<Box<dyn Future<Output = Result<()>> + Send + 'a>>;

impl ModelManager {
    /// Makes every composing model of ensemble `name` serve, then checks the ensemble against their
    /// configurations. A composing model that does not serve leaves the ensemble waiting for it.
    pub(super) async fn prepare_ensemble(self: &Arc<Self>, name: &str, cfg: &ModelConfig) -> Result<Arc<EnsemblePlan>> {
        let graph = EnsembleGraph::from_config(cfg)?;
        if let Some(entry) = self.table.write().get_mut(name) {
            entry.composing = graph.composing_models();
        }
        let mut composing = Vec::with_capacity(graph.steps().len());
        for (index, step) in graph.steps().iter().enumerate() {
            match self.ensure_serving(name, index, step).await {
                Ok(m) => composing.push(m),
                Err(e) => {
                    if let Some(entry) = self.table.write().get_mut(name) {
                        entry.awaiting_composing.insert(step.model.clone());
                    }
                    return Err(e);
                }
            }
        }
        let configs: Vec<&ModelConfig> = composing.iter().map(|m| m.config.as_ref()).collect();
        graph.check_composing(cfg, &configs)?;
        let models: Vec<StepModel> = composing
            .iter()
            .map(|m| StepModel {
                batching: m.config.max_batch_size > 0,
                input_dims: m.config.input.iter().map(|i| (i.name.clone(), i.dims.clone())).collect(),
                decoupled: m.config.model_transaction_policy.as_ref().is_some_and(|p| p.decoupled),
            })
            .collect();
        let decoupled = graph.check_decoupled(&models.iter().map(|m| m.decoupled).collect::<Vec<_>>())?;
        Ok(Arc::new(EnsemblePlan { graph, models, decoupled }))
    }

    /// The composing model of step `index` of `ensemble`, serving. When it does not serve, it is loaded
    /// if explicit model control is on or nobody has tried to load it yet (a repository model whose
    /// turn has not come); a model that failed in the other modes is not retried here.
    async fn ensure_serving(self: &Arc<Self>, ensemble: &str, index: usize, step: &Step) -> Result<Arc<LoadedModel>> {
        let dep = step.model.as_str();
        if let Ok(m) = self.get(dep, step.version) {
            return Ok(m);
        }
        let version = step.version.map(|v| format!(" version {v}")).unwrap_or_default();
        let unavailable = |e: Error| {
            Error::invalid(format!(
                "ensemble '{ensemble}': step {index}: composing model '{dep}'{version} is not available: {}",
                e.message
            ))
        };
        self.wait_for(ensemble, dep).map_err(unavailable)?;
        let result = async {
            let _turn = self.lock_model(dep).await;
            if let Ok(m) = self.get(dep, step.version) {
                return Ok(m);
            }
            let tried = self.table.read().get(dep).is_some_and(|e| !e.unloaded);
            if self.load_composing || !tried {
                tracing::info!("Loading model '{dep}', a composing model of ensemble '{ensemble}'.");
                let loaded = self.boxed_load_holding_lock(dep).await;
                // Other ensembles waiting for this model load again; this one is loading already. The
                // cascade runs on its own task: it may need locks that this load holds.
                let this = self.clone();
                let (dep_name, skip) = (dep.to_string(), ensemble.to_string());
                tokio::spawn(async move { this.composing_changed(&dep_name, Some(&skip)).await });
                loaded?;
            }
            self.get(dep, step.version)
        }
        .await;
        self.waits.lock().remove(ensemble);
        result.map_err(unavailable)
    }

    /// Records that the load of `ensemble` waits for `dep`, refusing a wait that closes a circle
    /// (an ensemble that, through its steps, contains itself), which would otherwise deadlock.
    fn wait_for(&self, ensemble: &str, dep: &str) -> Result<()> {
        let mut waits = self.waits.lock();
        let mut chain = vec![ensemble.to_string(), dep.to_string()];
        let mut current = dep.to_string();
        while current != ensemble {
            match waits.get(&current) {
                Some(next) if chain.len() <= waits.len() + 2 => {
                    chain.push(next.clone());
                    current = next.clone();
                }
                _ => {
                    waits.insert(ensemble.to_string(), dep.to_string());
                    return Ok(());
                }
            }
        }
        let path: Vec<String> = chain.iter().map(|m| format!("'{m}'")).collect();
        Err(Error::invalid(format!("circular ensemble dependency: {}", path.join(" → "))))
    }

    /// After `name` loaded, failed or was unloaded: ensembles waiting for it load again once it
    /// serves, ensembles checked against an older copy of it load again to be checked against this one,
    /// and ensembles that use it stop serving when it does not. Ensembles unloaded on purpose, loading
    /// now, or `skip` are left alone.
    pub(super) async fn composing_changed(self: &Arc<Self>, name: &str, skip: Option<&str>) {
        let dependents: Vec<(String, bool)> = {
            let table = self.table.read();
            let (serving, generation) = table
                .get(name)
                .map(|e| (e.versions.values().any(|s| s.model.is_some()), e.generation))
                .unwrap_or((false, 0));
            table
                .iter()
                .filter(|(e, entry)| entry.composing.contains(name) && Some(e.as_str()) != skip && !entry.loading)
                .filter_map(|(e, entry)| {
                    let ensemble_serving = entry.versions.values().any(|s| s.model.is_some());
                    let stale = ensemble_serving && entry.generation < generation;
                    if serving && (entry.awaiting_composing.contains(name) || stale) {
                        Some((e.clone(), true))
                    } else if !serving && ensemble_serving {
                        Some((e.clone(), false))
                    } else {
                        None
                    }
                })
                .collect()
        };
        for (ensemble, reload) in dependents {
            let step: Boxed<'_> = if reload {
                tracing::info!("Loading ensemble '{ensemble}' again: its composing model '{name}' changed.");
                self.boxed_load(&ensemble)
            } else {
                self.boxed_unload_for(ensemble, name.to_string())
            };
            // The outcome is in the ensemble's state and the log.
            let _ = step.await;
        }
    }

    // The loads below call back into the ensemble code above; returning them boxed with their type
    // spelled out keeps the compiler from proving `Send` around that cycle.

    /// [`ModelManager::load`], boxed.
    fn boxed_load<'a>(self: &'a Arc<Self>, name: &'a str) -> Boxed<'a> {
        Box::pin(self.load(name, LoadOptions::default()))
    }

    /// Unloads `ensemble` because `composing` stopped serving, then what depends on the ensemble; boxed.
    fn boxed_unload_for(self: &Arc<Self>, ensemble: String, composing: String) -> Boxed<'static> {
        let this = self.clone();
        Box::pin(async move {
            let r = this.unload_with(&ensemble, Some(&composing)).await;
            this.composing_changed(&ensemble, None).await;
            r
        })
    }

    /// [`ModelManager::load_holding_lock`] of a composing model, boxed.
    fn boxed_load_holding_lock<'a>(self: &'a Arc<Self>, name: &'a str) -> Boxed<'a> {
        Box::pin(self.load_holding_lock(name, LoadOptions::default(), false))
    }

    /// Whether `name` serves and its folder has not changed since it loaded (an ensemble that started
    /// first may have loaded it as a composing model).
    pub(super) fn serving_unchanged(&self, name: &str) -> bool {
        let fingerprint = {
            let table = self.table.read();
            match table.get(name) {
                Some(e) if e.versions.values().any(|s| s.model.is_some()) => e.fingerprint,
                _ => return false,
            }
        };
        let (found, _) = self.scan();
        matches!(found.get(name), Some(Ok(dir)) if Some(repository::fingerprint(dir)) == fingerprint)
    }
}

/// Builds one version of an ensemble: no instances, only its scheduler over the composing models.
pub(super) fn load_version(
    name: &str,
    version: i64,
    cfg: Arc<ModelConfig>,
    dir: &Path,
    labels: Arc<HashMap<String, Arc<Vec<String>>>>,
    plan: &EnsemblePlan,
    steps: Arc<dyn StepRunner>,
) -> Result<Arc<LoadedModel>> {
    let started = Instant::now();
    let version_dir = dir.join(version.to_string());
    if !version_dir.is_dir() {
        return Err(Error::invalid(format!("version folder '{}' does not exist", version_dir.display())));
    }
    let cfg = with_transaction_policy(cfg, plan.decoupled);
    let io = ModelIo::from_config(&cfg)?;
    let model = LoadedModel::assemble(name, version, cfg, io, &labels, started, |cfg, stats| {
        Ok(Box::new(EnsembleScheduler::start(cfg, version, plan.graph.clone(), plan.models.clone(), steps, stats)?))
    })?;
    Ok(Arc::new(LoadedModel { folder: Some(dir.to_path_buf()), ..model }))
}

/// The ensemble's configuration saying whether it is decoupled, as Triton reports it: decoupled exactly
/// when one of its steps is, whatever its own `model_transaction_policy` said. A decoupled ensemble's
/// responses are streamed, and it gets the statistics of decoupled models.
fn with_transaction_policy(cfg: Arc<ModelConfig>, decoupled: bool) -> Arc<ModelConfig> {
    if cfg.model_transaction_policy.as_ref().map(|p| p.decoupled) == Some(decoupled) {
        return cfg;
    }
    let mut cfg = Arc::unwrap_or_clone(cfg);
    cfg.model_transaction_policy.get_or_insert_with(Default::default).decoupled = decoupled;
    Arc::new(cfg)
}
