//! Model control: start-up loading, poll mode and reloads, and the load and unload API as the
//! control mode allows it.

use super::handle::Server;
use super::options::ControlMode;
use crate::core::lifecycle::IndexEntry;
use crate::core::repository::SyncScope;
use crate::error::{Error, Result};
use crate::model_api::LoadOptions;
use std::sync::atomic::Ordering;

impl Server {
    /// Loads the start-up models as the control mode says. Failures leave those models UNAVAILABLE;
    /// with `exit_on_error` the first one is returned instead.
    pub async fn startup(&self) -> Result<()> {
        let o = &self.inner.opts;
        // Cloud repositories first: when every model loads, all of them must be in their views before
        // the scan (errors are logged and leave those models out; the server starts regardless). Named
        // models are brought in by their own loads, whose failures then name the storage's error; with
        // none, a listing fills the repository index.
        let everything = o.control_mode != ControlMode::Explicit || o.load_models.iter().any(|m| m == "*");
        if everything {
            let _ = self.inner.models.sync_remotes(SyncScope::All).await;
        } else if o.load_models.is_empty() {
            let _ = self.inner.models.sync_remotes(SyncScope::List).await;
        }
        let names: Vec<String> = match o.control_mode {
            ControlMode::None | ControlMode::Poll => self.inner.models.repository_models(),
            ControlMode::Explicit => {
                if o.load_models.iter().any(|m| m == "*") {
                    self.inner.models.repository_models()
                } else {
                    o.load_models.iter().flat_map(|m| self.inner.models.keys_for(m)).collect()
                }
            }
        };
        // As in Triton, a repository path that cannot be read stops the server: it is a deployment
        // mistake, not a model failure.
        let (_, scan_errors) = crate::core::repository::scan(&o.repositories);
        if let Some(e) = scan_errors.into_iter().next() {
            return Err(e);
        }
        let loads = names.iter().map(|n| {
            let models = self.inner.models.clone();
            let n = n.clone();
            async move { (n.clone(), models.load_requested(&n, everything).await) }
        });
        let results = futures_util::future::join_all(loads).await;
        self.inner.started.store(true, Ordering::SeqCst);
        self.inner.flags_changed.send_modify(|n| *n = n.wrapping_add(1));
        if o.exit_on_error {
            if let Some((name, Err(e))) = results.into_iter().find(|(_, r)| r.is_err()) {
                return Err(e.context(format!("model '{name}' failed to load and --exit-on-error is set")));
            }
        }
        Ok(())
    }

    /// Poll mode: rescans the repositories forever, loading new or changed models and removing vanished ones.
    pub async fn poll_repositories(self) {
        let mut tick = tokio::time::interval(self.inner.opts.poll_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tick.tick().await;
            if !self.inner.accepting.load(Ordering::SeqCst) {
                return;
            }
            self.poll_once().await;
        }
    }

    /// One poll-mode rescan.
    pub async fn poll_once(&self) {
        let models = &self.inner.models;
        let _ = models.sync_remotes(SyncScope::All).await;
        let (on_disk, _) = self.inner.models.scan();
        for (name, dir) in &on_disk {
            let changed = match dir {
                Ok(d) => models.fingerprint(name) != Some(crate::core::repository::fingerprint(d)),
                Err(_) => models.fingerprint(name).is_some(),
            };
            if changed {
                tracing::info!("Model '{name}' changed in the repository; reloading it.");
                let _ = models.load(name, LoadOptions::default()).await;
            }
        }
        for name in models.known_models() {
            if !on_disk.contains_key(&name) {
                tracing::info!("Model '{name}' was removed from the repository; unloading it.");
                let _ = models.remove(&name).await;
            }
        }
    }

    /// A reload (SIGHUP): in poll mode, one poll now; in explicit mode, the models already known are
    /// reloaded if their files changed (nothing new is loaded); in none mode, nothing.
    pub async fn rescan(&self) {
        match self.inner.opts.control_mode {
            ControlMode::Poll => self.poll_once().await,
            ControlMode::Explicit => {
                let models = &self.inner.models;
                let _ = models.sync_remotes(SyncScope::Models(&models.known_models())).await;
                let (on_disk, _) = self.inner.models.scan();
                for name in models.known_models() {
                    let Some(Ok(dir)) = on_disk.get(&name) else { continue };
                    if models.fingerprint(&name).is_some_and(|f| f != crate::core::repository::fingerprint(dir)) {
                        tracing::info!("Model '{name}' changed in the repository; reloading it.");
                        let _ = models.load(&name, LoadOptions::default()).await;
                    }
                }
            }
            ControlMode::None => {}
        }
    }

    /// Unloads every model, waiting for queued and running requests to finish and for the backends'
    /// finalizers to run.
    pub async fn unload_all(&self) {
        self.inner.models.unload_all().await;
    }

    /// A receiver that sees a new value after every change of a model's state (loads, unloads,
    /// failures, versions coming and going).
    pub fn model_changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.inner.models.changes()
    }

    /// Every model version the server knows with its state, without reading the repositories
    /// (unlike [`Self::repository_index`]).
    pub fn model_states(&self) -> Vec<IndexEntry> {
        self.inner.models.states()
    }

    pub fn repository_index(&self, ready_only: bool) -> Vec<IndexEntry> {
        self.inner.models.index(ready_only)
    }

    pub async fn load_model(&self, name: &str, opts: LoadOptions) -> Result<()> {
        self.check_control("load")?;
        // With namespacing, a name in several repositories loads each repository's copy (a load with
        // files makes one model of the name given).
        let keys = match opts.files.is_empty() {
            true => self.inner.models.keys_for(name),
            false => vec![name.to_string()],
        };
        let mut result = Ok(());
        for key in keys {
            let r = self.inner.models.load(&key, opts.clone()).await;
            result = result.and(r);
        }
        result
    }

    pub async fn unload_model(&self, name: &str) -> Result<()> {
        self.unload_model_with(name, false).await
    }

    /// Unloads a model; with `dependents` (a request's `unload_dependents`), the ensembles that use
    /// it, directly or through other ensembles, are unloaded first, and stay unloaded when it loads again.
    pub async fn unload_model_with(&self, name: &str, dependents: bool) -> Result<()> {
        self.check_control("unload")?;
        let mut result = Ok(());
        for key in self.inner.models.keys_for(name) {
            if dependents {
                self.inner.models.unload_dependents(&key).await?;
            }
            let r = self.inner.models.unload(&key).await;
            result = result.and(r);
        }
        result
    }

    /// `--model-control-mode`.
    pub fn control_mode(&self) -> ControlMode {
        self.inner.opts.control_mode
    }

    fn check_control(&self, what: &str) -> Result<()> {
        if self.inner.opts.control_mode == ControlMode::Explicit {
            Ok(())
        } else {
            Err(Error::unavailable(format!(
                "explicit model {what} is not allowed: the server runs with --model-control-mode={}",
                match self.inner.opts.control_mode {
                    ControlMode::None => "none",
                    ControlMode::Poll => "poll",
                    ControlMode::Explicit => "explicit",
                }
            )))
        }
    }
}
