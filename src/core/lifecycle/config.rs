//! The load's configuration: the load API's `config` override (kept for later loads while the model
//! serves), the declared configuration the agents see, the completed one read from the folder the
//! agents chose, its labels, and the versions its policy selects.

use super::fetch::scrub;
use super::manager::ModelManager;
use super::versions::Attempt;
use crate::core::repository::{self, namespace, VersionPolicy};
use crate::error::{Error, Result};
use crate::model_api::LoadOptions;
use crate::proto::inference::ModelConfig;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What a load's versions are built from.
pub(super) struct Plan {
    pub(super) cfg: Arc<ModelConfig>,
    /// The folder the versions load from (the agents' copy, when they made one).
    pub(super) dir: PathBuf,
    pub(super) labels: Arc<HashMap<String, Arc<Vec<String>>>>,
    /// The versions the policy selects.
    pub(super) wanted: Vec<i64>,
}

impl ModelManager {
    /// Marks the model as loading; a load without a `config` parameter or files reuses the override of
    /// the load that serves (as tritonserver 2.51 does).
    pub(super) fn begin_load(&self, name: &str, opts: &mut LoadOptions) {
        let mut table = self.write();
        let entry = table.entry(name.to_string()).or_default();
        let serving = !entry.unloaded && entry.versions.values().any(|s| s.model.is_some());
        if opts.config_json.is_none() && opts.files.is_empty() && serving {
            opts.config_json = entry.config_override.clone();
        }
        entry.loading = true;
        entry.unloaded = false;
        entry.awaiting_composing.clear();
    }

    /// The configuration as declared (with the request's override), which names the repository agents.
    /// Agents run on the model's files before anything else reads them (auto-complete reads the model
    /// file), so this one is not completed.
    pub(super) async fn read_declared(
        &self,
        at: Attempt<'_>,
        dir: &Path,
        cfg_json: Option<String>,
    ) -> Result<ModelConfig> {
        let (dir2, name2, ropts) = (dir.to_path_buf(), namespace::plain(at.name).to_string(), self.opts.clone());
        let declared = tokio::task::spawn_blocking(move || {
            repository::read_declared_config(&dir2, &name2, &ropts, cfg_json.as_deref())
        })
        .await
        .map_err(|e| Error::internal(format!("config reader failed: {e}")))?;
        declared.map_err(|e| self.model_failure(at, e))
    }

    /// Reads the configuration to serve: completed from `dir`, or, where the agents handed back another
    /// copy of the files (`location`), that copy's own `config.pbtxt` with the agents of the declared
    /// configuration. Then its labels and the versions to load.
    pub(super) async fn read_config(
        &self,
        at: Attempt<'_>,
        dir: PathBuf,
        location: Option<PathBuf>,
        declared: ModelConfig,
        from_request: bool,
    ) -> Result<Plan> {
        let relocated = location.as_ref().is_some_and(|l| *l != dir);
        let agents = declared.model_repository_agents.clone();
        let (dir2, name2, ropts) =
            (location.clone().unwrap_or_else(|| dir.clone()), namespace::plain(at.name).to_string(), self.opts.clone());
        let cfg = tokio::task::spawn_blocking(move || {
            if relocated {
                // The agents' copy: its own config.pbtxt, as Triton reads it.
                repository::read_model_config_detailed(&dir2, &name2, &ropts, None)
            } else {
                repository::complete_config(&dir2, &name2, &ropts, declared, from_request)
            }
        })
        .await
        .map_err(|e| Error::internal(format!("config reader failed: {e}")))?;
        let cfg = match cfg {
            Ok(mut c) => {
                if relocated {
                    c.model_repository_agents = agents;
                }
                Arc::new(c)
            }
            Err(f) => {
                let mut e = f.error;
                e.message = scrub(at.hide, &e.message);
                return Err(match f.version {
                    Some(v) => self.version_failed(at.name, at.fingerprint, v, e),
                    None => self.model_failed(at.name, at.fingerprint, e),
                });
            }
        };
        self.plan(at, cfg, location.unwrap_or(dir))
    }

    /// The labels of `cfg` and the versions its policy selects in `dir`.
    fn plan(&self, at: Attempt<'_>, cfg: Arc<ModelConfig>, dir: PathBuf) -> Result<Plan> {
        let labels = match repository::read_labels(&cfg, &dir) {
            Ok(l) => Arc::new(l),
            Err(e) => return Err(self.model_failure(at, e)),
        };
        let available = crate::model_config::list_versions(&dir);
        let wanted = VersionPolicy::from_config(&cfg).select(&available);
        if wanted.is_empty() {
            let e =
                Error::invalid(format!("model '{}' has no version folders to serve in '{}'", at.name, dir.display()));
            return Err(self.model_failure(at, e));
        }
        Ok(Plan { cfg, dir, labels, wanted })
    }
}
