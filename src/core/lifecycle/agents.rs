//! Repository agents in a load: their LOAD runs on the model's files before anything else reads them,
//! they may hand back another folder to load from, and they hear how the load went.

use super::manager::ModelManager;
use crate::error::{Error, Result};
use crate::proto::inference::ModelConfig;
use std::path::{Path, PathBuf};

/// A model's repository agents between their LOAD and the end of the load: dropped on an early return,
/// they see LOAD_FAIL.
pub(super) struct PendingAgents(pub(super) Option<Box<dyn crate::model_api::agents::AgentChain>>);

impl Drop for PendingAgents {
    fn drop(&mut self) {
        if let Some(mut chain) = self.0.take() {
            chain.finish_load(false);
        }
    }
}

impl ModelManager {
    /// Runs LOAD through the repository agents the declared configuration `cfg` names (none:
    /// `Ok(None)`), leaving them in `pending`; returns the folder to load from.
    pub(super) async fn run_agents(
        &self,
        name: &str,
        cfg: &ModelConfig,
        dir: &Path,
        pending: &mut PendingAgents,
    ) -> Result<Option<PathBuf>> {
        if cfg.model_repository_agents.as_ref().is_none_or(|a| a.agents.is_empty()) {
            return Ok(None);
        }
        let Some(host) = self.opts.agents.0.clone() else {
            return Err(Error::unavailable(format!(
                "model '{name}' names repository agents, which this server cannot run"
            )));
        };
        let (n, d, c) = (name.to_string(), dir.to_path_buf(), cfg.clone());
        let chain = tokio::task::spawn_blocking(move || host.load(&n, &d, &c))
            .await
            .map_err(|e| Error::internal(format!("repository agents failed: {e}")))??;
        let location = chain.location();
        pending.0 = Some(chain);
        if location != dir {
            tracing::info!(
                "Model '{name}' is loaded from '{}', where its repository agents put it.",
                location.display()
            );
        }
        Ok(Some(location))
    }

    /// Tells the agents in `pending` whether the load succeeded (`ok`); after a success they stay with
    /// the model until it is unloaded, and the agents of the previous load are unloaded.
    pub(super) async fn hand_over_agents(&self, name: &str, mut pending: PendingAgents, ok: bool) {
        let mut old_agents = None;
        if let Some(mut chain) = pending.0.take() {
            let chain = tokio::task::spawn_blocking(move || {
                chain.finish_load(ok);
                chain
            })
            .await
            .ok();
            if ok {
                old_agents = self.write().entry(name.to_string()).or_default().agents.take();
                self.write().entry(name.to_string()).or_default().agents = chain;
            }
        }
        if let Some(mut old) = old_agents {
            let _ = tokio::task::spawn_blocking(move || old.unload()).await;
        }
    }
}
