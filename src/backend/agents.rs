//! The repository agents of this server: agents built into tritonrs by name, and Triton agent
//! libraries (`<--repoagent-directory>/<name>/libtritonrepoagent_<name>.so`) for every other name. A
//! model's agents run in the order Triton documents: LOAD in order (each agent sees the location the
//! previous one left); then LOAD_COMPLETE or LOAD_FAIL in reverse order; at unload, UNLOAD in order
//! and UNLOAD_COMPLETE in reverse order. The agent list and parameters are those of the model's
//! original `config.pbtxt` for the whole load, whatever a relocated copy says.

pub mod checksum;
pub mod decrypt;

use crate::error::{Error, Result};
use crate::model_api::agents::{AgentAction, AgentChain, AgentModel, RepoAgent, RepoAgents};
use crate::proto::inference::ModelConfig;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use crate::model_api::DEFAULT_REPOAGENT_DIRECTORY;

/// Agents by name: built-in ones first, then agent libraries.
pub struct AgentRegistry {
    builtin: HashMap<String, Arc<dyn RepoAgent>>,
    directory: PathBuf,
    /// Libraries loaded so far, by name (kept for the process, as tritonserver keeps them).
    libraries: Mutex<HashMap<String, Arc<dyn RepoAgent>>>,
}

impl AgentRegistry {
    pub fn new(directory: PathBuf) -> AgentRegistry {
        AgentRegistry { builtin: HashMap::new(), directory, libraries: Mutex::new(HashMap::new()) }
    }

    /// The registry with the agents built into tritonrs, `checksum` and `decrypt`, set up from
    /// `--repoagent-config` (`decrypt,key-file=PATH`, `decrypt,work-dir=PATH`).
    pub fn with_builtin(directory: PathBuf, settings: &crate::model_api::BackendConfig) -> AgentRegistry {
        let mut r = AgentRegistry::new(directory);
        r.insert("checksum", Arc::new(checksum::Checksum));
        let key_file = settings.get("decrypt", "key-file").map(PathBuf::from);
        let work_dir = settings.get("decrypt", "work-dir").map(PathBuf::from);
        r.insert("decrypt", Arc::new(decrypt::Decrypt::new(key_file, work_dir)));
        r
    }

    /// Adds a built-in agent under `name` (it takes precedence over a library of that name).
    pub fn insert(&mut self, name: &str, agent: Arc<dyn RepoAgent>) {
        self.builtin.insert(name.to_string(), agent);
    }

    fn agent(&self, name: &str) -> Result<Arc<dyn RepoAgent>> {
        if let Some(a) = self.builtin.get(name) {
            return Ok(a.clone());
        }
        if name.is_empty() || name.contains(['/', '\0']) || name == "." || name == ".." {
            return Err(Error::invalid(format!("'{name}' is not a repository agent name")));
        }
        let mut libs = self.libraries.lock();
        if let Some(a) = libs.get(name) {
            return Ok(a.clone());
        }
        let path = self.directory.join(name).join(format!("libtritonrepoagent_{name}.so"));
        let agent: Arc<dyn RepoAgent> = Arc::new(super::capi::CAgent::load(&path, name)?);
        libs.insert(name.to_string(), agent.clone());
        Ok(agent)
    }
}

impl RepoAgents for AgentRegistry {
    fn load(&self, name: &str, dir: &Path, config: &ModelConfig) -> Result<Box<dyn AgentChain>> {
        let config_json = crate::model_config::pbtxt::config_to_json(config).to_string();
        let specs = config.model_repository_agents.as_ref().map(|a| a.agents.clone()).unwrap_or_default();
        let mut chain = Chain { model: name.to_string(), models: Vec::new(), location: dir.to_path_buf() };
        for spec in specs {
            let mut parameters: Vec<(String, String)> = spec.parameters.into_iter().collect();
            parameters.sort();
            let step = self.agent(&spec.name).and_then(|agent| {
                let mut m = agent.model(name, &chain.location, &parameters, &config_json)?;
                m.action(AgentAction::Load)?;
                Ok(m)
            });
            match step {
                Ok(m) => {
                    chain.location = m.location();
                    chain.models.push((spec.name, m));
                }
                Err(e) => {
                    chain.finish_load(false);
                    return Err(e.context(format!("repository agent '{}' failed to load model '{name}'", spec.name)));
                }
            }
        }
        Ok(Box::new(chain))
    }
}

/// One model's agents, in the order its configuration names them.
struct Chain {
    model: String,
    models: Vec<(String, Box<dyn AgentModel>)>,
    location: PathBuf,
}

impl Chain {
    fn run(&mut self, action: AgentAction, reverse: bool) {
        let model = self.model.clone();
        let mut step = |(agent, m): &mut (String, Box<dyn AgentModel>)| {
            if let Err(e) = m.action(action) {
                tracing::warn!("Repository agent '{agent}' failed {action:?} for model '{model}': {}", e.message);
            }
        };
        if reverse {
            self.models.iter_mut().rev().for_each(&mut step);
        } else {
            self.models.iter_mut().for_each(&mut step);
        }
    }
}

impl AgentChain for Chain {
    fn location(&self) -> PathBuf {
        self.location.clone()
    }

    fn finish_load(&mut self, ok: bool) {
        self.run(if ok { AgentAction::LoadComplete } else { AgentAction::LoadFail }, true);
        if !ok {
            // Finalized now: a failed load leaves nothing to unload.
            while self.models.pop().is_some() {}
        }
    }

    fn unload(&mut self) {
        self.run(AgentAction::Unload, false);
        self.run(AgentAction::UnloadComplete, true);
        while self.models.pop().is_some() {}
    }
}

impl Drop for Chain {
    fn drop(&mut self) {
        // Finalized in reverse order, as they were created.
        while self.models.pop().is_some() {}
    }
}
