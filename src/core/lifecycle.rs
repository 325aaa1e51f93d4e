//! Model lifecycle: every model version's state (LOADING → READY → UNLOADING / UNAVAILABLE, with a
//! reason), background loads on a bounded pool, and swapping a new version in only once it is READY.
//! Ensembles depend on their composing models; `ensemble` keeps the two in step.

mod ensemble;

use crate::core::rate_limiter::{Limited, Needs, RateLimiter, ResourceKey};
use crate::core::repository::{self, RemoteRepository, RepoOptions, SyncScope, VersionPolicy};
use crate::core::scheduler::ensemble::StepRunner;
use crate::core::scheduler::{self, Scheduler};
use crate::core::stats::ModelStats;
use crate::core::validate::ModelIo;
use crate::core::warmup;
use crate::error::{Error, ErrorKind, Result};
use crate::model_api::{BackendRegistry, LoadOptions};
use crate::model_api::{InstanceKind, InstanceSpec, ModelContext};
use crate::proto::inference::{model_instance_group::Kind, ModelConfig, ModelRateLimiter};
use parking_lot::RwLock;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A model version's state, as the repository index reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelState {
    Loading,
    Ready,
    Unloading,
    Unavailable,
}

impl ModelState {
    pub fn as_str(self) -> &'static str {
        match self {
            ModelState::Loading => "LOADING",
            ModelState::Ready => "READY",
            ModelState::Unloading => "UNLOADING",
            ModelState::Unavailable => "UNAVAILABLE",
        }
    }
}

/// A model version that is loaded and serving.
pub struct LoadedModel {
    pub name: String,
    pub version: i64,
    pub config: Arc<ModelConfig>,
    pub io: ModelIo,
    /// Labels per output name, from `label_filename`.
    pub labels: HashMap<String, Arc<Vec<String>>>,
    pub scheduler: Box<dyn Scheduler>,
    pub stats: Arc<ModelStats>,
    /// How long the load took.
    pub load_duration: Duration,
    /// Instances that can stop being ready while loaded (see [`crate::model_api::Readiness`]).
    pub probes: Vec<Arc<dyn crate::model_api::Readiness>>,
    /// The backend library serving the model, when it is not one built into tritonrs.
    pub served_by: Option<String>,
    /// Instances to tell when this version leaves service (see [`crate::model_api::Retirement`]).
    pub retirements: Vec<Arc<dyn crate::model_api::Retirement>>,
}

/// One version's slot in the table.
#[derive(Clone)]
struct VersionSlot {
    state: ModelState,
    reason: String,
    /// The serving model; kept while a replacement loads, so serving never stops.
    model: Option<Arc<LoadedModel>>,
    /// Whether the version policy (still) selects this version; retired and unloaded versions are not
    /// counted by strict readiness.
    wanted: bool,
}

impl VersionSlot {
    fn loading() -> Self {
        VersionSlot { state: ModelState::Loading, reason: String::new(), model: None, wanted: true }
    }
}

/// Everything known about one model name.
#[derive(Default)]
struct ModelEntry {
    versions: BTreeMap<i64, VersionSlot>,
    /// A failure that concerns the whole model (bad config, duplicate name), with no version.
    error: Option<String>,
    /// The folder fingerprint at the last load, for poll mode.
    fingerprint: Option<u64>,
    /// Set while a load of this model runs (shown as LOADING before its versions are known).
    loading: bool,
    /// Set by an explicit unload: the model is UNAVAILABLE on purpose and does not count for readiness.
    unloaded: bool,
    /// Holds model files given through the load API until the model is replaced or unloaded.
    _files: Option<Arc<tempfile::TempDir>>,
    /// The load API's `config` parameter of the last load that served (without files): a later load
    /// without one reuses it while the model stays loaded, as tritonserver 2.51 does; an explicit
    /// unload forgets it, so the next load reads `config.pbtxt`.
    config_override: Option<String>,
    /// For an ensemble, its composing models (from the last configuration read); empty otherwise.
    composing: BTreeSet<String>,
    /// The composing models an ensemble is down for: it loads again as soon as one of them serves
    /// (Triton reloads dependents the same way).
    awaiting_composing: BTreeSet<String>,
    /// The model's repository agents after their LOAD, until the model is unloaded.
    agents: Option<Box<dyn crate::model_api::agents::AgentChain>>,
    /// Increases with every version swapped in, across all models: an ensemble older than its
    /// composing model was checked against that model's previous configuration.
    generation: u64,
}

/// One row of the repository index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexEntry {
    pub name: String,
    pub version: Option<i64>,
    pub state: Option<ModelState>,
    pub reason: String,
}

/// Owns all models and their states.
pub struct ModelManager {
    table: RwLock<HashMap<String, ModelEntry>>,
    repos: Vec<PathBuf>,
    opts: RepoOptions,
    backends: BackendRegistry,
    /// Bounds concurrent loads (`--model-load-thread-count`).
    load_slots: tokio::sync::Semaphore,
    /// One lock per model name: loads and unloads of the same model run one after another.
    locks: parking_lot::Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Set with `--rate-limit execution_count`.
    limiter: Option<Arc<RateLimiter>>,
    /// Runs ensemble steps through the server's inference path.
    steps: Arc<dyn StepRunner>,
    /// Explicit model control: loading an ensemble also (re)loads its composing models that do not
    /// serve, as Triton does. In the other modes the repository decides what loads, so an ensemble only
    /// loads a composing model nobody has tried to load yet.
    load_composing: bool,
    /// Ensemble load → the model it waits for, so that circular dependencies fail instead of deadlocking.
    waits: parking_lot::Mutex<HashMap<String, String>>,
    /// The last generation handed out (see `ModelEntry::generation`).
    generations: std::sync::atomic::AtomicU64,
    /// Bumped after every change to the table (a state, a version, a model added or removed), for
    /// front-ends that follow model states (the MQTT bridge's subscriptions and state topic).
    changes: tokio::sync::watch::Sender<u64>,
    /// Cloud repositories, whose local views are among `repos`.
    remotes: Vec<Arc<dyn RemoteRepository>>,
    /// Explicit model control: a load first brings the model's files from the cloud repositories.
    sync_on_load: bool,
}

/// The table, locked for writing; tells the followers of [`ModelManager::changes`] when dropped.
struct TableWrite<'a> {
    /// Always `Some` until dropped.
    guard: Option<parking_lot::RwLockWriteGuard<'a, HashMap<String, ModelEntry>>>,
    changes: &'a tokio::sync::watch::Sender<u64>,
}

impl std::ops::Deref for TableWrite<'_> {
    type Target = HashMap<String, ModelEntry>;
    fn deref(&self) -> &Self::Target {
        self.guard.as_deref().expect("the table guard is held until drop; this is a bug")
    }
}

impl std::ops::DerefMut for TableWrite<'_> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        self.guard.as_deref_mut().expect("the table guard is held until drop; this is a bug")
    }
}

impl Drop for TableWrite<'_> {
    fn drop(&mut self) {
        drop(self.guard.take());
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
    }
}

impl ModelManager {
    pub fn new(repos: Vec<PathBuf>, opts: RepoOptions, backends: BackendRegistry, load_threads: usize) -> Self {
        ModelManager {
            table: RwLock::new(HashMap::new()),
            repos,
            opts,
            backends,
            load_slots: tokio::sync::Semaphore::new(load_threads.max(1)),
            locks: parking_lot::Mutex::new(HashMap::new()),
            limiter: None,
            steps: Arc::new(ensemble::NoSteps),
            load_composing: false,
            waits: parking_lot::Mutex::new(HashMap::new()),
            generations: std::sync::atomic::AtomicU64::new(0),
            changes: tokio::sync::watch::Sender::new(0),
            remotes: Vec::new(),
            sync_on_load: false,
        }
    }

    /// Adds the cloud repositories (their views are already among the repositories); with
    /// `sync_on_load` each load brings the model's files from them first (explicit model control).
    pub fn with_remotes(mut self, remotes: Vec<Arc<dyn RemoteRepository>>, sync_on_load: bool) -> Self {
        self.remotes = remotes;
        self.sync_on_load = sync_on_load;
        self
    }

    pub fn remotes(&self) -> &[Arc<dyn RemoteRepository>] {
        &self.remotes
    }

    /// Brings every cloud repository's view up to date for `scope`; the errors are logged and returned.
    pub async fn sync_remotes(&self, scope: SyncScope<'_>) -> Vec<Error> {
        let mut errors = Vec::new();
        for r in &self.remotes {
            for e in r.sync(scope).await {
                tracing::error!("{}", e.message);
                errors.push(e);
            }
        }
        errors
    }

    /// Locks the table for a change; followers of [`Self::changes`] hear of it once the lock is released.
    fn write(&self) -> TableWrite<'_> {
        TableWrite { guard: Some(self.table.write()), changes: &self.changes }
    }

    /// A receiver that sees a new value after every change of a model's state.
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Makes every instance whose group has a `rate_limiter` hold its resources while it executes.
    pub fn with_rate_limiter(mut self, limiter: Option<Arc<RateLimiter>>) -> Self {
        self.limiter = limiter;
        self
    }

    /// Lets ensembles run: `steps` runs their steps, and `load_composing` says whether loading an
    /// ensemble may (re)load composing models that do not serve (explicit model control).
    pub fn with_ensembles(mut self, steps: Arc<dyn StepRunner>, load_composing: bool) -> Self {
        self.steps = steps;
        self.load_composing = load_composing;
        self
    }

    /// The serving model for `version`, or the highest READY version when `None`.
    pub fn get(&self, name: &str, version: Option<i64>) -> Result<Arc<LoadedModel>> {
        let table = self.table.read();
        let entry = table
            .get(name)
            .ok_or_else(|| Error::not_found(format!("Request for unknown model: '{name}' is not found")))?;
        match version {
            Some(v) => {
                let slot = entry.versions.get(&v).ok_or_else(|| {
                    Error::not_found(format!("Request for unknown model: '{name}' version {v} is not found"))
                })?;
                match (&slot.model, slot.state) {
                    (Some(m), ModelState::Ready | ModelState::Loading) => Ok(m.clone()),
                    _ => Err(Error::unavailable(format!(
                        "Request for unknown model: '{name}' version {v} is not at ready state ({})",
                        slot.state.as_str()
                    ))),
                }
            }
            None => entry.versions.values().rev().find_map(|s| s.model.clone()).ok_or_else(|| {
                // Say why when the index knows (e.g. an ensemble whose composing model went away).
                let why = entry
                    .error
                    .as_deref()
                    .or_else(|| entry.versions.values().next_back().map(|s| s.reason.as_str()))
                    .filter(|r| !r.is_empty())
                    .map(|r| format!(" ({r})"))
                    .unwrap_or_default();
                Error::unavailable(format!("Request for unknown model: '{name}' has no available versions{why}"))
            }),
        }
    }

    /// Whether `name` (and `version`, when given) is ready to serve.
    pub fn is_ready(&self, name: &str, version: Option<i64>) -> Result<bool> {
        let table = self.table.read();
        let entry = table
            .get(name)
            .ok_or_else(|| Error::not_found(format!("Request for unknown model: '{name}' is not found")))?;
        Ok(match version {
            Some(v) => entry.versions.get(&v).map(|s| s.model.is_some()).unwrap_or(false),
            None => entry.versions.values().any(|s| s.model.is_some()),
        })
    }

    /// The versions of `name` that are serving, ascending.
    pub fn ready_versions(&self, name: &str) -> Vec<i64> {
        let table = self.table.read();
        table
            .get(name)
            .map(|e| e.versions.iter().filter(|(_, s)| s.model.is_some()).map(|(v, _)| *v).collect())
            .unwrap_or_default()
    }

    /// All ready model versions, for statistics.
    pub fn loaded(&self) -> Vec<Arc<LoadedModel>> {
        let table = self.table.read();
        let mut v: Vec<_> = table.values().flat_map(|e| e.versions.values().filter_map(|s| s.model.clone())).collect();
        v.sort_by(|a, b| (a.name.as_str(), a.version).cmp(&(b.name.as_str(), b.version)));
        v
    }

    /// Strict readiness: every model the server is meant to serve is READY in every version its policy
    /// selects. Models and versions unloaded on purpose do not count.
    pub fn all_ready(&self) -> bool {
        let table = self.table.read();
        table.values().filter(|e| !e.unloaded).all(|e| {
            e.error.is_none()
                && !(e.loading && e.versions.is_empty())
                && e.versions.values().filter(|s| s.wanted).all(|s| s.state == ModelState::Ready)
        })
    }

    /// The repository index: every model folder in the repositories plus every model the server knows.
    pub fn index(&self, ready_only: bool) -> Vec<IndexEntry> {
        let (on_disk, _) = repository::scan(&self.repos);
        // A cloud repository's models are listed even before their files are brought in.
        let listed: Vec<String> = self.remotes.iter().flat_map(|r| r.listed_models()).collect();
        let mut out = self.rows(on_disk.keys().map(String::as_str).chain(listed.iter().map(String::as_str)));
        if ready_only {
            out.retain(|e| e.state == Some(ModelState::Ready));
        }
        out
    }

    /// Every model the server knows (loaded, loading or failed) with its versions' states, without
    /// reading the repositories.
    pub fn states(&self) -> Vec<IndexEntry> {
        self.rows(std::iter::empty())
    }

    /// Index rows of the known models plus `also` (names found on disk).
    fn rows<'a>(&self, also: impl Iterator<Item = &'a str>) -> Vec<IndexEntry> {
        let table = self.table.read();
        let mut names: Vec<&str> = also.collect();
        names.extend(table.keys().map(String::as_str));
        names.sort();
        names.dedup();
        let mut out = Vec::new();
        for name in names {
            let row = |state: Option<ModelState>, reason: &str| IndexEntry {
                name: name.into(),
                version: None,
                state,
                reason: reason.to_string(),
            };
            match table.get(name) {
                Some(e) if e.versions.is_empty() => out.push(match (&e.error, e.loading, e.unloaded) {
                    (Some(err), _, _) => row(Some(ModelState::Unavailable), err),
                    (None, true, _) => row(Some(ModelState::Loading), ""),
                    (None, false, true) => row(Some(ModelState::Unavailable), "unloaded"),
                    (None, false, false) => row(None, ""),
                }),
                Some(e) => {
                    for (v, s) in &e.versions {
                        out.push(IndexEntry {
                            name: name.into(),
                            version: Some(*v),
                            state: Some(s.state),
                            reason: s.reason.clone(),
                        })
                    }
                }
                None => out.push(row(None, "")),
            }
        }
        out
    }

    /// Names of every model folder in the repositories.
    pub fn repository_models(&self) -> Vec<String> {
        repository::scan(&self.repos).0.into_keys().collect()
    }

    /// Names of models the server has been asked to serve (loaded, loading or failed).
    pub fn known_models(&self) -> Vec<String> {
        self.table.read().keys().cloned().collect()
    }

    /// The fingerprint recorded at the last load of `name`.
    pub fn fingerprint(&self, name: &str) -> Option<u64> {
        self.table.read().get(name).and_then(|e| e.fingerprint)
    }

    /// Waits for this model's turn: loads and unloads of one model are serialized, as in Triton.
    async fn lock_model(&self, name: &str) -> tokio::sync::OwnedMutexGuard<()> {
        let lock = self.locks.lock().entry(name.to_string()).or_default().clone();
        lock.lock_owned().await
    }

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

    async fn load_with(
        self: &Arc<Self>,
        name: &str,
        opts: LoadOptions,
        remember_missing: bool,
        sync: bool,
    ) -> Result<()> {
        // A model name is a folder name in a repository: nothing that could lead elsewhere, or that a
        // file system would refuse (NUL, control characters, a backslash, over 255 bytes).
        let bad = name.is_empty()
            || name == "."
            || name.contains("..")
            || name.len() > 255
            || name.chars().any(|c| c == '/' || c == '\\' || c.is_control());
        if bad {
            return Err(Error::invalid(format!("'{}' is not a valid model name", name.escape_debug())));
        }
        if sync && self.sync_on_load && opts.files.is_empty() && !self.remotes.is_empty() {
            let errors = self.sync_remotes(SyncScope::Models(std::slice::from_ref(&name.to_string()))).await;
            // Without a copy of the model anywhere, the store's error is the reason; with one (cached
            // earlier, or in a local repository) the load goes on from it.
            if let Some(e) = errors.into_iter().next() {
                if !repository::scan(&self.repos).0.contains_key(name) {
                    return Err(e);
                }
            }
        }
        let _turn = self.lock_model(name).await;
        self.load_holding_lock(name, opts, remember_missing).await
    }

    /// [`Self::load_with`] for a caller that already holds the model's lock.
    async fn load_holding_lock(
        self: &Arc<Self>,
        name: &str,
        mut opts: LoadOptions,
        remember_missing: bool,
    ) -> Result<()> {
        {
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
        // Files from the load API live in a private temporary folder for the model's lifetime. Its path
        // is the server's business: messages show paths relative to it.
        let files_dir = if opts.files.is_empty() {
            None
        } else {
            if opts.config_json.is_none() {
                return Err(Error::invalid(format!(
                    "loading model '{name}' from file parameters requires the 'config' parameter too"
                )));
            }
            Some(Arc::new(write_files(name, &opts.files)?))
        };
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
        let scrub = |msg: &str| scrub(hide, msg);
        let dir: PathBuf = match &files_dir {
            Some(tmp) => tmp.path().join(name),
            None => {
                let (found, _) = repository::scan(&self.repos);
                match found.get(name) {
                    Some(Ok(d)) => d.clone(),
                    Some(Err(e)) => return Err(e.clone()),
                    None => {
                        return Err(Error::not_found(format!(
                            "failed to load '{name}', no model folder of that name in the model repositories"
                        )))
                    }
                }
            }
        };
        // A cloud repository's view links each model to its current download; the load reads that
        // download, so a newer one switched in meanwhile cannot mix with it.
        let dir = match self.remotes.iter().any(|r| dir.parent() == Some(r.local_dir())) {
            true => std::fs::canonicalize(&dir).unwrap_or(dir),
            false => dir,
        };
        let fingerprint = repository::fingerprint(&dir);
        let dir2 = dir.clone();
        let name2 = name.to_string();
        let ropts = self.opts.clone();
        let cfg_json = opts.config_json.clone();
        // Repository agents run on the model's files before anything else reads them (auto-complete
        // reads the model file), from the configuration as declared, and may hand back another copy
        // of the files: the configuration and versions are then read from there, with the agents of
        // the declared configuration.
        let declared = tokio::task::spawn_blocking(move || {
            repository::read_declared_config(&dir2, &name2, &ropts, cfg_json.as_deref())
        })
        .await
        .map_err(|e| Error::internal(format!("config reader failed: {e}")))?;
        let declared = match declared {
            Ok(c) => c,
            Err(mut e) => {
                e.message = scrub(&e.message);
                return Err(self.model_failed(name, fingerprint, e));
            }
        };
        let mut pending = PendingAgents(None);
        let location = match self.run_agents(name, &declared, &dir, &mut pending).await {
            Ok(l) => l,
            Err(mut e) => {
                e.message = scrub(&e.message);
                return Err(self.model_failed(name, fingerprint, e));
            }
        };
        let relocated = location.as_ref().is_some_and(|l| *l != dir);
        let agents = declared.model_repository_agents.clone();
        let (dir2, name2, ropts) =
            (location.clone().unwrap_or_else(|| dir.clone()), name.to_string(), self.opts.clone());
        let from_request = opts.config_json.is_some();
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
                e.message = scrub(&e.message);
                return Err(match f.version {
                    Some(v) => self.version_failed(name, fingerprint, v, e),
                    None => self.model_failed(name, fingerprint, e),
                });
            }
        };
        let dir = location.unwrap_or(dir);
        let labels = match repository::read_labels(&cfg, &dir) {
            Ok(l) => Arc::new(l),
            Err(mut e) => {
                e.message = scrub(&e.message);
                return Err(self.model_failed(name, fingerprint, e));
            }
        };
        let available = crate::model_config::list_versions(&dir);
        let wanted = VersionPolicy::from_config(&cfg).select(&available);
        if wanted.is_empty() {
            let e = Error::invalid(scrub(&format!(
                "model '{name}' has no version folders to serve in '{}'",
                dir.display()
            )));
            return Err(self.model_failed(name, fingerprint, e));
        }
        // An ensemble's versions load once its composing models serve and it fits their configurations.
        let ensemble = if cfg.platform == "ensemble" {
            match self.prepare_ensemble(name, &cfg).await {
                Ok(plan) => Some(plan),
                Err(e) => return Err(self.model_failed(name, fingerprint, e)),
            }
        } else {
            None
        };
        {
            let mut table = self.write();
            let entry = table.entry(name.to_string()).or_default();
            entry.error = None;
            for v in &wanted {
                let slot = entry.versions.entry(*v).or_insert_with(VersionSlot::loading);
                slot.wanted = true;
                if slot.model.is_none() {
                    slot.state = ModelState::Loading;
                    slot.reason.clear();
                }
            }
        }
        let mut tasks = Vec::new();
        for &v in &wanted {
            let this = self.clone();
            let (cfg, dir, labels, name) = (cfg.clone(), dir.clone(), labels.clone(), name.to_string());
            let ensemble = ensemble.clone();
            tasks.push(tokio::spawn(async move {
                let _permit = this.load_slots.acquire().await;
                if let Some(plan) = ensemble {
                    return (v, ensemble::load_version(&name, v, cfg, &dir, labels, &plan, this.steps.clone()));
                }
                let worker = this.clone();
                let res = tokio::task::spawn_blocking(move || {
                    load_version(
                        &worker.backends,
                        worker.limiter.as_ref(),
                        worker.opts.max_tensor_bytes,
                        &name,
                        v,
                        cfg,
                        &dir,
                        labels,
                    )
                })
                .await
                .unwrap_or_else(|e| Err(Error::internal(format!("model load task failed: {e}"))));
                (v, res)
            }));
        }
        let mut failures = Vec::new();
        let mut retired = Vec::new();
        for t in tasks {
            let (v, res) = t.await.map_err(|e| Error::internal(format!("model load task failed: {e}")))?;
            let mut table = self.write();
            let entry = table.entry(name.to_string()).or_default();
            let slot = entry.versions.entry(v).or_insert_with(VersionSlot::loading);
            match res {
                Ok(m) => {
                    let by = m.served_by.as_ref().map(|b| format!(", served by {b}")).unwrap_or_default();
                    tracing::info!(
                        "Model '{name}' version {v} is READY (loaded in {:.1} ms{by}).",
                        m.load_duration.as_secs_f64() * 1e3
                    );
                    // The index says which library serves a model that tritonrs does not run itself.
                    slot.reason = m.served_by.as_ref().map(|b| format!("served by {b}")).unwrap_or_default();
                    if let Some(old) = slot.model.replace(m) {
                        retired.push(old);
                    }
                    slot.state = ModelState::Ready;
                    entry.generation = self.generations.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
                }
                Err(mut e) => {
                    e.message = scrub(&e.message);
                    tracing::error!("Model '{name}' version {v} failed to load: {}", e.message);
                    if slot.model.is_some() {
                        // The previous copy keeps serving; the failed reload is reported to the caller.
                        slot.reason = format!("reload failed, previous version still serving: {}", e.message);
                    } else {
                        slot.state = ModelState::Unavailable;
                        slot.reason = e.message.clone();
                    }
                    failures.push(format!("version {v}: {}", e.message));
                }
            }
        }
        // The agents hear how the load went; they stay with the model until it is unloaded.
        let mut old_agents = None;
        if let Some(mut chain) = pending.0.take() {
            let ok = failures.is_empty();
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
        // Versions the policy no longer selects are unloaded once the new ones are in place.
        {
            let mut table = self.write();
            let entry = table.entry(name.to_string()).or_default();
            entry.fingerprint = Some(fingerprint);
            entry.config_override = if files_dir.is_some() { None } else { opts.config_json.clone() };
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
        }
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

    /// Runs LOAD through the repository agents the declared configuration `cfg` names (none:
    /// `Ok(None)`), leaving them in `pending`; returns the folder to load from.
    async fn run_agents(
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

    /// Records a failure of the whole model (before any version loads). Versions still serving from an
    /// earlier load keep serving; otherwise the model shows UNAVAILABLE with this reason.
    fn model_failed(&self, name: &str, fingerprint: u64, e: Error) -> Error {
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
    fn version_failed(&self, name: &str, fingerprint: u64, version: i64, e: Error) -> Error {
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

    /// Unloads every version of a model and waits until it is gone: the versions are UNLOADING while
    /// requests already queued or running finish on the old instances (instances that take a
    /// [`crate::model_api::Retirement`] notice, a C backend's, fail the queued ones instead), then
    /// UNAVAILABLE. Ensembles that use the model stop serving too.
    pub async fn unload(self: &Arc<Self>, name: &str) -> Result<()> {
        let result = self.unload_with(name, None).await;
        self.composing_changed(name, None).await;
        result
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
    async fn unload_with(&self, name: &str, because: Option<&str>) -> Result<()> {
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

    /// Marks versions whose instances have finished unloading as UNAVAILABLE.
    fn finish_unloading(&self, name: &str) {
        if let Some(entry) = self.write().get_mut(name) {
            for slot in entry.versions.values_mut().filter(|s| s.state == ModelState::Unloading) {
                slot.state = ModelState::Unavailable;
            }
        }
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

/// Drops the given models and waits until their instance threads have finished every request that was
/// already queued and have dropped their instances (running the backends' finalizers). Requests still
/// holding a model keep its queue open, so this also waits for them. Instances that asked to hear of it
/// are told first (`unload`: the model is unloaded, not replaced), so that an instance waiting on a
/// backend that never answers gives up in bounded time instead of holding the unload forever.
pub async fn retire(models: Vec<Arc<LoadedModel>>, unload: bool) {
    for r in models.iter().flat_map(|m| m.retirements.iter()) {
        r.retiring(unload);
    }
    let counters: Vec<_> = models.iter().map(|m| m.scheduler.running()).collect();
    drop(models);
    for c in counters {
        while c.load(std::sync::atomic::Ordering::SeqCst) > 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

/// Creates every instance of one version and starts its scheduler.
#[allow(clippy::too_many_arguments)]
fn load_version(
    backends: &BackendRegistry,
    limiter: Option<&Arc<RateLimiter>>,
    max_tensor_bytes: usize,
    name: &str,
    version: i64,
    cfg: Arc<ModelConfig>,
    dir: &Path,
    labels: Arc<HashMap<String, Arc<Vec<String>>>>,
) -> Result<Arc<LoadedModel>> {
    let started = Instant::now();
    let version_dir = dir.join(version.to_string());
    if !version_dir.is_dir() {
        return Err(Error::invalid(format!("version folder '{}' does not exist", version_dir.display())));
    }
    let backend = backends.get(&cfg.backend)?;
    let io = ModelIo::from_config(&cfg)?;
    let ctx = ModelContext {
        name: name.to_string(),
        version,
        config: cfg.clone(),
        model_dir: dir.to_path_buf(),
        version_dir,
    };
    let samples = warmup::samples(&cfg, dir, max_tensor_bytes)?;
    let limits = instance_limits(&cfg);
    let mut instances = Vec::new();
    let mut probes = Vec::new();
    let mut retirements = Vec::new();
    let mut served_by = None;
    for (spec, limit) in instance_specs(&cfg).into_iter().zip(limits) {
        let mut inst = backend.create_instance(&ctx, &spec)?;
        probes.extend(inst.readiness());
        retirements.extend(inst.retirement());
        served_by = served_by.or_else(|| inst.served_by());
        // Warmup runs before the scheduler exists, so no request can reach a cold instance.
        warmup::run(&mut *inst, &samples, &spec.name)?;
        if let (Some(limiter), Some(rl)) = (limiter, limit) {
            let device = match spec.kind {
                InstanceKind::Cpu => None,
                InstanceKind::Gpu { device_id } => Some(device_id),
            };
            let needs = Needs {
                resources: rl
                    .resources
                    .iter()
                    .map(|r| {
                        let key = ResourceKey { name: r.name.clone(), device: (!r.global).then_some(device) };
                        (key, r.count)
                    })
                    .collect(),
                priority: rl.priority,
            };
            limiter.register(&needs)?;
            inst = Box::new(Limited { inner: inst, limiter: limiter.clone(), needs });
        }
        instances.push((spec.name, inst));
    }
    if !samples.is_empty() {
        tracing::info!("Model '{name}' version {version} ran {} warmup sample(s) on each instance.", samples.len());
    }
    let stats = Arc::new(ModelStats::new(cfg.max_batch_size));
    let scheduler = scheduler::start(name, &cfg, dir, instances, stats.clone())?;
    Ok(Arc::new(LoadedModel {
        name: name.to_string(),
        version,
        io,
        labels: (*labels).clone(),
        config: cfg,
        scheduler,
        stats,
        load_duration: started.elapsed(),
        probes,
        served_by,
        retirements,
    }))
}

/// The `rate_limiter` of each instance's group, in [`instance_specs`] order.
fn instance_limits(cfg: &ModelConfig) -> Vec<Option<&ModelRateLimiter>> {
    let mut out = Vec::new();
    for g in &cfg.instance_group {
        let devices = if g.kind == Kind::Gpu as i32 { g.gpus.len().max(1) } else { 1 };
        for _ in 0..devices * g.count.max(1) as usize {
            out.push(g.rate_limiter.as_ref());
        }
    }
    out
}

/// Expands `instance_group` into named instances, as Triton names them (`<group>_<index>`).
pub fn instance_specs(cfg: &ModelConfig) -> Vec<InstanceSpec> {
    let mut out = Vec::new();
    for g in &cfg.instance_group {
        let count = g.count.max(1);
        let devices: Vec<Option<i32>> = if g.kind == Kind::Gpu as i32 {
            if g.gpus.is_empty() {
                vec![Some(0)]
            } else {
                g.gpus.iter().map(|&d| Some(d)).collect()
            }
        } else {
            vec![None]
        };
        let mut idx = 0;
        for dev in devices {
            for _ in 0..count {
                out.push(InstanceSpec {
                    name: format!("{}_{idx}", g.name),
                    kind: match dev {
                        Some(device_id) => InstanceKind::Gpu { device_id },
                        None => InstanceKind::Cpu,
                    },
                    profiles: g.profile.clone(),
                });
                idx += 1;
            }
        }
    }
    out
}

/// `msg` without the folder `hide` (a load request's private files): paths show relative to it.
fn scrub(hide: Option<&str>, msg: &str) -> String {
    match hide {
        Some(prefix) => msg.replace(prefix, ""),
        None => msg.to_string(),
    }
}

/// Longest name of one folder or file in a `file:` parameter (common filesystems' limit).
const MAX_FILE_NAME_BYTES: usize = 255;
/// Longest `file:` path, and deepest nesting, so the full path stays far below PATH_MAX.
const MAX_FILE_PATH_BYTES: usize = 1024;
const MAX_FILE_PATH_DEPTH: usize = 16;

/// Checks the names of a load request's `file:` parameters: relative paths inside the model folder,
/// each name short enough for the filesystem, no NUL, and no two naming the same file or a file and a
/// folder at once (`1` and `1/model.onnx`). Every problem is the client's (400), and no message shows a
/// server path.
fn check_file_names(files: &[(String, Vec<u8>)]) -> Result<Vec<PathBuf>> {
    let bad = |rel: &str, why: &str| {
        Error::invalid(format!("file parameter 'file:{}' {why}", crate::model_config::paths::printable(rel)))
    };
    let mut out = Vec::with_capacity(files.len());
    for (rel, _) in files {
        if rel.is_empty() {
            return Err(bad(rel, "has no path; name a file inside the model folder, such as 'file:1/model.onnx'"));
        }
        if rel.contains('\0') {
            return Err(bad(rel, "contains a NUL character"));
        }
        if rel.len() > MAX_FILE_PATH_BYTES {
            return Err(bad(rel, &format!("is longer than {MAX_FILE_PATH_BYTES} bytes")));
        }
        let path = Path::new(rel);
        let mut clean = PathBuf::new();
        for c in path.components() {
            match c {
                std::path::Component::Normal(part) if part.len() > MAX_FILE_NAME_BYTES => {
                    return Err(bad(rel, &format!("has a name longer than {MAX_FILE_NAME_BYTES} bytes")))
                }
                std::path::Component::Normal(part) => clean.push(part),
                std::path::Component::CurDir => {}
                _ => return Err(bad(rel, "must be a relative path inside the model folder")),
            }
        }
        if clean.as_os_str().is_empty() {
            return Err(bad(rel, "has no file name"));
        }
        if clean.components().count() > MAX_FILE_PATH_DEPTH {
            return Err(bad(rel, &format!("is nested deeper than {MAX_FILE_PATH_DEPTH} folders")));
        }
        out.push(clean);
    }
    // A file may not also be another file's folder, and two names may not denote one file.
    for (i, a) in out.iter().enumerate() {
        for (j, b) in out.iter().enumerate() {
            if i == j {
                continue;
            }
            if a == b && i < j {
                return Err(Error::invalid(format!(
                    "file parameters 'file:{}' and 'file:{}' name the same file",
                    crate::model_config::paths::printable(&files[i].0),
                    crate::model_config::paths::printable(&files[j].0)
                )));
            }
            if b.starts_with(a) && a != b {
                return Err(Error::invalid(format!(
                    "file parameters 'file:{}' and 'file:{}' collide: '{}' cannot be both a file and a folder",
                    crate::model_config::paths::printable(&files[i].0),
                    crate::model_config::paths::printable(&files[j].0),
                    crate::model_config::paths::printable(&a.display().to_string())
                )));
            }
        }
    }
    Ok(out)
}

/// Writes load-API model files into a fresh temporary repository (names checked by
/// [`check_file_names`]). A failure to write is the server's, reported without its paths.
fn write_files(name: &str, files: &[(String, Vec<u8>)]) -> Result<tempfile::TempDir> {
    let names = check_file_names(files)?;
    let tmp = tempfile::Builder::new()
        .prefix("tritonrs-model-")
        .tempdir()
        .map_err(|e| Error::internal(format!("cannot create a temporary folder for model files: {e}")))?;
    let root = tmp.path().join(name);
    for (rel, (shown, data)) in names.iter().zip(files) {
        let path = root.join(rel);
        let fail = |e: std::io::Error| {
            Error::internal(format!(
                "cannot write the file of parameter 'file:{}': {e}",
                crate::model_config::paths::printable(shown)
            ))
        };
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(fail)?;
        }
        std::fs::write(&path, data).map_err(fail)?;
    }
    Ok(tmp)
}

/// A model's repository agents between their LOAD and the end of the load: dropped on an early return,
/// they see LOAD_FAIL.
struct PendingAgents(Option<Box<dyn crate::model_api::agents::AgentChain>>);

impl Drop for PendingAgents {
    fn drop(&mut self) {
        if let Some(mut chain) = self.0.take() {
            chain.finish_load(false);
        }
    }
}
