//! Repository agents (Triton's TRITONREPOAGENT): code that runs on a model's files around its load and
//! unload, and may hand the server another copy of them (checked, decrypted, fetched). A model names
//! them in `model_repository_agents { agents [ { name parameters } ] }`.
//!
//! The core asks a [`RepoAgents`] to run a model's agents and keeps the [`AgentChain`] it gets while the
//! model is loaded. Agents are built in (by name) or Triton agent libraries
//! (`libtritonrepoagent_<name>.so`); both implement [`RepoAgent`].

use crate::error::Result;
use crate::proto::inference::ModelConfig;
use std::path::{Path, PathBuf};

/// `TRITONREPOAGENT_ActionType`, with the API's values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentAction {
    Load = 0,
    LoadComplete = 1,
    LoadFail = 2,
    Unload = 3,
    UnloadComplete = 4,
}

/// One agent, able to take part in models' loads.
pub trait RepoAgent: Send + Sync {
    /// The agent's view of one model (`TRITONREPOAGENT_ModelInitialize`): its files at `location`, the
    /// agent's parameters from the model's configuration, and that configuration as JSON.
    fn model(
        &self,
        name: &str,
        location: &Path,
        parameters: &[(String, String)],
        config_json: &str,
    ) -> Result<Box<dyn AgentModel>>;
}

/// One agent's view of one model, from its LOAD to its UNLOAD_COMPLETE; dropping it finalizes it
/// (`TRITONREPOAGENT_ModelFinalize`) and removes the folders the agent acquired.
pub trait AgentModel: Send + Sync {
    fn action(&mut self, action: AgentAction) -> Result<()>;
    /// Where the model's files are now: the location it was given, unless the agent handed back
    /// another (`TRITONREPOAGENT_ModelRepositoryUpdate`).
    fn location(&self) -> PathBuf;
}

/// What runs a model's agents; given to the repository by whoever assembles the server.
pub trait RepoAgents: Send + Sync {
    /// Runs LOAD through the agents `config` names, in order, starting from the files in `dir`. On an
    /// error, the agents that already ran LOAD see LOAD_FAIL (in reverse order) before it returns.
    fn load(&self, name: &str, dir: &Path, config: &ModelConfig) -> Result<Box<dyn AgentChain>>;
}

/// The server's agents, if it has any (a repository option).
#[derive(Clone, Default)]
pub struct Agents(pub Option<std::sync::Arc<dyn RepoAgents>>);

impl std::fmt::Debug for Agents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "Agents(some)" } else { "Agents(none)" })
    }
}

/// A model's agents after LOAD, held while the model is loaded.
pub trait AgentChain: Send + Sync {
    /// Where the backend finds the model's files (the last agent's location).
    fn location(&self) -> PathBuf;
    /// LOAD_COMPLETE (`ok`) or LOAD_FAIL, in reverse order.
    fn finish_load(&mut self, ok: bool);
    /// UNLOAD in order, then UNLOAD_COMPLETE in reverse order.
    fn unload(&mut self);
}
