//! The load pipeline: the public entry points, and `load_from`, which runs the steps in order (fetch,
//! repository agents, configuration, version states, instances, swap and retire).

use super::agents::PendingAgents;
use super::fetch::{check_model_name, request_files, scrub};
use super::manager::ModelManager;
use super::swap::retire;
use super::versions::Attempt;
use crate::core::repository::{self, namespace};
use crate::error::{Error, ErrorKind, Result};
use crate::model_api::LoadOptions;
use std::sync::Arc;
use std::time::Instant;

impl ModelManager {
    /// Loads (or reloads) a model: reads its configuration, loads every version its policy selects, swaps
    /// each in once READY, and unloads versions the policy no longer selects. Serving continues from the
    /// old versions until then.
    pub async fn load(self: &Arc<Self>, name: &str, opts: LoadOptions) -> Result<()> {
        let result = self.load_with(name, opts, false, true).await;
        self.composing_changed(name, None).await;
        // As tritonserver words it, and as clients (tritonclient's examples) look for.
        result.map_err(|mut e| {
            if !e.message.starts_with("failed to load") {
                e.message = format!("failed to load '{name}': {}", e.message);
            }
            e
        })
    }

    /// Loads a model the server was told to serve at start-up (`--load-model`, or every model in the
    /// repositories). Unlike an API load, a name that matches no model folder is remembered as
    /// UNAVAILABLE, so the index and strict readiness show the missing model. `synced`: start-up has
    /// just brought every model of the cloud repositories into their views, so this load does not ask
    /// them again.
    pub async fn load_requested(self: &Arc<Self>, name: &str, synced: bool) -> Result<()> {
        // An ensemble that loaded first may have loaded this model already, as its composing model.
        if self.serving_unchanged(name) {
            return Ok(());
        }
        let result = self.load_with(name, LoadOptions::default(), true, !synced).await;
        self.composing_changed(name, None).await;
        result
    }

    pub(super) async fn load_with(
        self: &Arc<Self>,
        name: &str,
        opts: LoadOptions,
        remember_missing: bool,
        sync: bool,
    ) -> Result<()> {
        match namespace::split(name) {
            // A key of `--model-namespacing` names one repository's copy of a model found on disk.
            (plain, Some(_)) if self.opts.namespacing && opts.files.is_empty() => check_model_name(plain)?,
            _ => check_model_name(name)?,
        }
        if sync {
            self.fetch_from_remotes(name, &opts).await?;
        }
        let _turn = self.lock_model(name).await;
        self.load_holding_lock(name, opts, remember_missing).await
    }

    /// [`Self::load_with`] for a caller that already holds the model's lock.
    pub(super) async fn load_holding_lock(
        self: &Arc<Self>,
        name: &str,
        mut opts: LoadOptions,
        remember_missing: bool,
    ) -> Result<()> {
        self.begin_load(name, &mut opts);
        let result = self.load_inner(name, opts).await;
        let mut table = self.write();
        let forget = match (table.get_mut(name), &result) {
            // A name that matches no model folder is not remembered.
            (Some(e), Err(err)) if !remember_missing && e.versions.is_empty() && err.kind == ErrorKind::NotFound => {
                true
            }
            (Some(e), r) => {
                e.loading = false;
                if let Err(err) = r {
                    if e.versions.is_empty() {
                        e.error = Some(err.message.clone());
                    }
                }
                false
            }
            (None, _) => false,
        };
        if forget {
            table.remove(name);
        }
        result
    }

    async fn load_inner(self: &Arc<Self>, name: &str, opts: LoadOptions) -> Result<()> {
        let files_dir = request_files(name, &opts)?;
        // The request's files are the server's business: messages show paths relative to their folder.
        let hide = files_dir.as_ref().map(|t| format!("{}/", t.path().display()));
        self.load_from(name, opts, files_dir, hide.as_deref()).await.map_err(|mut e| {
            e.message = scrub(hide.as_deref(), &e.message);
            e
        })
    }

    /// [`Self::load_inner`] once the load request's files are written; `hide` is their folder, left
    /// out of every message and reason.
    async fn load_from(
        self: &Arc<Self>,
        name: &str,
        opts: LoadOptions,
        files_dir: Option<Arc<tempfile::TempDir>>,
        hide: Option<&str>,
    ) -> Result<()> {
        let started = Instant::now();
        let dir = self.model_dir(name, files_dir.as_deref())?;
        let at = Attempt { name, fingerprint: repository::fingerprint(&dir), hide };
        // Repository agents run on the model's files before anything else reads them, from the
        // configuration as declared, and may hand back another copy of the files to load from.
        let declared = self.read_declared(at, &dir, opts.config_json.clone()).await?;
        let mut pending = PendingAgents(None);
        let location = match self.run_agents(name, &declared, &dir, &mut pending).await {
            Ok(l) => l,
            Err(e) => return Err(self.model_failure(at, e)),
        };
        let mut plan = self.read_config(at, dir.clone(), location, declared, opts.config_json.is_some()).await?;
        if plan.cfg.platform == "ensemble" && self.opts.namespacing {
            let on_disk = self.scan().0;
            plan.cfg = Arc::new(namespace::steps_in_namespace(&plan.cfg, &dir, |k| on_disk.contains_key(k)));
        }
        // An ensemble's versions load once its composing models serve and it fits their configurations.
        let ensemble = if plan.cfg.platform == "ensemble" {
            match self.prepare_ensemble(name, &plan.cfg).await {
                Ok(p) => Some(p),
                Err(e) => return Err(self.model_failed(name, at.fingerprint, e)),
            }
        } else {
            None
        };
        self.mark_loading(name, &plan.wanted);
        let tasks = self.spawn_versions(name, &plan, ensemble);
        let (failures, mut retired) = self.swap_in(at, tasks).await?;
        // The agents hear how the load went; they stay with the model until it is unloaded.
        self.hand_over_agents(name, pending, failures.is_empty()).await;
        // Versions the policy no longer selects are unloaded once the new ones are in place.
        retired.extend(self.settle(at, &plan.wanted, files_dir, opts.config_json));
        // Replaced or no longer selected: a newer copy serves, so what is queued on the old one still runs.
        retire(retired, false).await;
        self.finish_unloading(name);
        if failures.is_empty() {
            tracing::debug!("Model '{name}' load finished in {:?}.", started.elapsed());
            Ok(())
        } else {
            Err(Error::invalid(format!("failed to load '{name}': {}", failures.join("; "))))
        }
    }
}
