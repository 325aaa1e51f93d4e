//! Version states during a load: a failure of the whole model or of one version before any version
//! loads is recorded (earlier versions keep serving), and the versions to load show LOADING.

use super::fetch::scrub;
use super::manager::ModelManager;
use super::state::{ModelState, VersionSlot};
use crate::error::Error;

/// One load under way, as its failures are recorded: the model, its folder's fingerprint, and the
/// load request's private folder, left out of every message.
#[derive(Clone, Copy)]
pub(super) struct Attempt<'a> {
    pub(super) name: &'a str,
    pub(super) fingerprint: u64,
    pub(super) hide: Option<&'a str>,
}

impl ModelManager {
    /// [`Self::model_failed`] for `at`, with the private folder left out of the message.
    pub(super) fn model_failure(&self, at: Attempt<'_>, mut e: Error) -> Error {
        e.message = scrub(at.hide, &e.message);
        self.model_failed(at.name, at.fingerprint, e)
    }

    /// Records a failure of the whole model (before any version loads). Versions still serving from an
    /// earlier load keep serving; otherwise the model shows UNAVAILABLE with this reason.
    pub(super) fn model_failed(&self, name: &str, fingerprint: u64, e: Error) -> Error {
        tracing::error!("Model '{name}' failed to load: {}", e.message);
        let mut table = self.write();
        let entry = table.entry(name.to_string()).or_default();
        entry.fingerprint = Some(fingerprint);
        if entry.versions.values().all(|s| s.model.is_none()) {
            entry.versions.clear();
            entry.error = Some(e.message.clone());
        }
        e
    }

    /// Records a failure of one version's model file found while reading the configuration (a broken
    /// `.onnx` read for auto-complete): as in Triton, that version is UNAVAILABLE with the reason, unless
    /// earlier versions still serve.
    pub(super) fn version_failed(&self, name: &str, fingerprint: u64, version: i64, e: Error) -> Error {
        tracing::error!("Model '{name}' version {version} failed to load: {}", e.message);
        let mut table = self.write();
        let entry = table.entry(name.to_string()).or_default();
        entry.fingerprint = Some(fingerprint);
        if entry.versions.values().all(|s| s.model.is_none()) {
            entry.versions.clear();
            entry.error = None;
            let slot = entry.versions.entry(version).or_insert_with(VersionSlot::loading);
            slot.state = ModelState::Unavailable;
            slot.reason = e.message.clone();
        }
        Error::new(e.kind, format!("failed to load '{name}': version {version}: {}", e.message))
    }

    /// Shows the `wanted` versions as LOADING (those still serving keep their state) and clears the
    /// model's failure.
    pub(super) fn mark_loading(&self, name: &str, wanted: &[i64]) {
        let mut table = self.write();
        let entry = table.entry(name.to_string()).or_default();
        entry.error = None;
        for v in wanted {
            let slot = entry.versions.entry(*v).or_insert_with(VersionSlot::loading);
            slot.wanted = true;
            if slot.model.is_none() {
                slot.state = ModelState::Loading;
                slot.reason.clear();
            }
        }
    }
}
