//! Swap and retire: each loaded version replaces the one serving only once it is READY, versions the
//! policy no longer selects leave service, and retired versions finish what is queued on them.

use super::fetch::scrub;
use super::instances::VersionLoad;
use super::manager::ModelManager;
use super::state::{LoadedModel, ModelState, VersionSlot};
use super::versions::Attempt;
use crate::error::{Error, Result};
use std::sync::Arc;
use std::time::Duration;

impl ModelManager {
    /// Waits for each version's load in turn and swaps it in, or records why it failed. Returns the
    /// failures (as the caller is told them) and the models that were replaced.
    pub(super) async fn swap_in(
        &self,
        at: Attempt<'_>,
        tasks: Vec<VersionLoad>,
    ) -> Result<(Vec<String>, Vec<Arc<LoadedModel>>)> {
        let mut failures = Vec::new();
        let mut retired = Vec::new();
        for t in tasks {
            let (v, res) = t.await.map_err(|e| Error::internal(format!("model load task failed: {e}")))?;
            let mut table = self.write();
            let entry = table.entry(at.name.to_string()).or_default();
            let slot = entry.versions.entry(v).or_insert_with(VersionSlot::loading);
            match res {
                Ok(m) => {
                    retired.extend(swap_version(at.name, v, slot, m));
                    entry.generation = self.generations.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
                }
                Err(mut e) => {
                    e.message = scrub(at.hide, &e.message);
                    failures.push(version_load_failed(at.name, v, slot, e));
                }
            }
        }
        Ok((failures, retired))
    }

    /// Records the end of a load in the table (its fingerprint, the override to reuse, the request's
    /// files) and takes out of service the versions the policy no longer selects; returns those models.
    pub(super) fn settle(
        &self,
        at: Attempt<'_>,
        wanted: &[i64],
        files_dir: Option<Arc<tempfile::TempDir>>,
        config_json: Option<String>,
    ) -> Vec<Arc<LoadedModel>> {
        let mut retired = Vec::new();
        let mut table = self.write();
        let entry = table.entry(at.name.to_string()).or_default();
        entry.fingerprint = Some(at.fingerprint);
        entry.config_override = if files_dir.is_some() { None } else { config_json };
        if files_dir.is_some() {
            entry._files = files_dir;
        }
        for (_, slot) in entry.versions.iter_mut().filter(|(v, _)| !wanted.contains(v)) {
            slot.wanted = false;
            if let Some(old) = slot.model.take() {
                retired.push(old);
                slot.state = ModelState::Unloading;
                slot.reason = "unloaded".into();
            } else if slot.state != ModelState::Unavailable {
                slot.state = ModelState::Unavailable;
                slot.reason = "unloaded".into();
            }
        }
        retired
    }

    /// Marks versions whose instances have finished unloading as UNAVAILABLE.
    pub(super) fn finish_unloading(&self, name: &str) {
        if let Some(entry) = self.write().get_mut(name) {
            for slot in entry.versions.values_mut().filter(|s| s.state == ModelState::Unloading) {
                slot.state = ModelState::Unavailable;
            }
        }
    }
}

/// Puts the loaded version `m` into `slot` as READY; returns the model it replaces.
fn swap_version(name: &str, v: i64, slot: &mut VersionSlot, m: Arc<LoadedModel>) -> Option<Arc<LoadedModel>> {
    let by = m.served_by.as_ref().map(|b| format!(", served by {b}")).unwrap_or_default();
    tracing::info!(
        "Model '{name}' version {v} is READY (loaded in {:.1} ms{by}).",
        m.load_duration.as_secs_f64() * 1e3
    );
    // The index says which library serves a model that tritonrs does not run itself.
    slot.reason = m.served_by.as_ref().map(|b| format!("served by {b}")).unwrap_or_default();
    let old = slot.model.replace(m);
    slot.state = ModelState::Ready;
    old
}

/// Records that version `v` failed to load (`e`, already scrubbed); returns the failure as the caller
/// is told it.
fn version_load_failed(name: &str, v: i64, slot: &mut VersionSlot, e: Error) -> String {
    tracing::error!("Model '{name}' version {v} failed to load: {}", e.message);
    if slot.model.is_some() {
        // The previous copy keeps serving; the failed reload is reported to the caller.
        slot.reason = format!("reload failed, previous version still serving: {}", e.message);
    } else {
        slot.state = ModelState::Unavailable;
        slot.reason = e.message.clone();
    }
    format!("version {v}: {}", e.message)
}

/// Drops the given models and waits until their instance threads have finished every request that was
/// already queued and have dropped their instances (running the backends' finalizers). Requests still
/// holding a model keep its queue open, so this also waits for them. Instances that asked to hear of it
/// are told first (`unload`: the model is unloaded, not replaced), so that an instance waiting on a
/// backend that never answers gives up in bounded time instead of holding the unload forever. Then
/// the heap's free pages are given back to the system.
pub async fn retire(models: Vec<Arc<LoadedModel>>, unload: bool) {
    for r in models.iter().flat_map(|m| m.retirements.iter()) {
        r.retiring(unload);
    }
    let counters: Vec<_> = models.iter().map(|m| m.scheduler.running()).collect();
    let retired_any = !models.is_empty();
    drop(models);
    for c in counters {
        while c.load(std::sync::atomic::Ordering::SeqCst) > 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    if retired_any {
        // The instances are gone: their weights and buffers go back to the system instead of staying
        // in the allocator's arenas (which load and unload on different threads keep growing).
        let _ = tokio::task::spawn_blocking(crate::platform::trim_heap).await;
    }
}
