//! Unloading: one model on purpose, an ensemble whose composing model went away, every model at
//! shutdown (ensembles first), and a model that vanished from the repositories.

use super::manager::ModelManager;
use super::state::ModelState;
use super::swap::retire;
use crate::error::{Error, ErrorKind, Result};
use std::collections::BTreeSet;
use std::sync::Arc;

impl ModelManager {
    /// Unloads every version of a model and waits until it is gone: the versions are UNLOADING while
    /// requests already queued or running finish on the old instances (instances that take a
    /// [`crate::model_api::Retirement`] notice, a C backend's, fail the queued ones instead), then
    /// UNAVAILABLE. Ensembles that use the model stop serving too.
    pub async fn unload(self: &Arc<Self>, name: &str) -> Result<()> {
        let result = self.unload_with(name, None).await;
        self.composing_changed(name, None).await;
        result
    }

    /// Unloads the ensembles that use `name`, directly or through other ensembles (an unload request's
    /// `unload_dependents`). As in tritonserver, each reads "unloaded" and loads again once the model it
    /// uses serves again.
    pub async fn unload_dependents(self: &Arc<Self>, name: &str) -> Result<()> {
        for (ensemble, uses) in self.dependents(name) {
            match self.unload_with(&ensemble, Some(&uses)).await {
                Err(e) if e.kind != ErrorKind::NotFound => return Err(e),
                _ => {}
            }
            if let Some(entry) = self.write().get_mut(&ensemble) {
                for slot in entry.versions.values_mut() {
                    slot.reason = "unloaded".to_string();
                }
            }
        }
        Ok(())
    }

    /// The ensembles that use `name`, directly or through other ensembles, each with the model it uses
    /// on the way; users before what they use.
    fn dependents(&self, name: &str) -> Vec<(String, String)> {
        let table = self.table.read();
        let mut found: Vec<(String, String)> = Vec::new();
        let mut queue = vec![name.to_string()];
        while let Some(model) = queue.pop() {
            for (n, e) in table.iter() {
                if e.composing.contains(&model) && n != name && !found.iter().any(|(f, _)| f == n) {
                    found.push((n.clone(), model.clone()));
                    queue.push(n.clone());
                }
            }
        }
        // An ensemble of ensembles goes before the ensembles it uses.
        found.reverse();
        found
    }

    /// Unloads every model (at shutdown), ensembles before the models they use, so that requests in
    /// flight through an ensemble can still run their remaining steps.
    pub async fn unload_all(&self) {
        let mut remaining: BTreeSet<String> = self.known_models().into_iter().collect();
        while !remaining.is_empty() {
            let wave: Vec<String> = {
                let table = self.table.read();
                let used: BTreeSet<&str> = remaining
                    .iter()
                    .filter_map(|n| table.get(n))
                    .flat_map(|e| e.composing.iter().map(String::as_str))
                    .collect();
                let free: Vec<String> = remaining.iter().filter(|n| !used.contains(n.as_str())).cloned().collect();
                // Only a circle of ensembles (which never loads) leaves nothing free.
                if free.is_empty() {
                    remaining.iter().cloned().collect()
                } else {
                    free
                }
            };
            futures_util::future::join_all(wave.iter().map(|n| self.unload_with(n, None))).await;
            for n in &wave {
                remaining.remove(n);
            }
        }
    }

    /// Unloads a model; `because` names the composing model whose loss takes an ensemble down (it then
    /// loads again when that model serves), `None` for an unload on purpose.
    pub(super) async fn unload_with(&self, name: &str, because: Option<&str>) -> Result<()> {
        let _turn = self.lock_model(name).await;
        let mut retired = Vec::new();
        let reason = match because {
            Some(m) => format!("unloaded: composing model '{m}' is not available"),
            None => "unloaded".to_string(),
        };
        {
            let mut table = self.write();
            let Some(entry) = table.get_mut(name) else {
                return Err(Error::not_found(format!("failed to unload '{name}': unknown model")));
            };
            entry.unloaded = true;
            entry.awaiting_composing = because.map(|m| BTreeSet::from([m.to_string()])).unwrap_or_default();
            entry.error = None;
            if because.is_none() {
                // An ensemble taken down by a composing model keeps them: poll mode must not see it as
                // changed, and it loads again from the same files.
                entry.fingerprint = None;
                entry._files = None;
                entry.config_override = None;
            }
            for slot in entry.versions.values_mut() {
                slot.wanted = false;
                slot.state = match slot.model.take() {
                    Some(m) => {
                        retired.push(m);
                        ModelState::Unloading
                    }
                    None => ModelState::Unavailable,
                };
                slot.reason = reason.clone();
            }
        }
        retire(retired, true).await;
        let agents = self.write().get_mut(name).and_then(|e| e.agents.take());
        if let Some(mut chain) = agents {
            let _ = tokio::task::spawn_blocking(move || chain.unload()).await;
        }
        self.finish_unloading(name);
        match because {
            Some(m) => tracing::info!("Model '{name}' is unloaded because its composing model '{m}' is not available."),
            None => tracing::info!("Model '{name}' is unloaded."),
        }
        Ok(())
    }

    /// Forgets a model that vanished from the repositories (poll mode).
    pub async fn remove(self: &Arc<Self>, name: &str) -> Result<()> {
        let r = self.unload_with(name, None).await;
        self.write().remove(name);
        self.composing_changed(name, None).await;
        match r {
            Err(e) if e.kind == ErrorKind::NotFound => Ok(()),
            other => other,
        }
    }
}
