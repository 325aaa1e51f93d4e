//! The model manager itself: its table of models behind a lock that tells followers of every change,
//! one turn per model name, and the options it is built with.

use super::state::ModelEntry;
use crate::core::rate_limiter::RateLimiter;
use crate::core::repository::{RemoteRepository, RepoOptions, SyncScope};
use crate::core::scheduler::ensemble::StepRunner;
use crate::error::{Error, Result};
use crate::model_api::types::{InferRequest, StreamResponse};
use crate::model_api::BackendRegistry;
use crate::model_api::ExecResult;
use futures_util::future::BoxFuture;
use parking_lot::RwLock;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

/// Owns all models and their states.
pub struct ModelManager {
    pub(super) table: RwLock<HashMap<String, ModelEntry>>,
    pub(super) repos: Vec<PathBuf>,
    pub(super) opts: RepoOptions,
    pub(super) backends: BackendRegistry,
    /// Bounds concurrent loads (`--model-load-thread-count`).
    pub(super) load_slots: tokio::sync::Semaphore,
    /// One lock per model name: loads and unloads of the same model run one after another.
    pub(super) locks: parking_lot::Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Set with `--rate-limit execution_count`.
    pub(super) limiter: Option<Arc<RateLimiter>>,
    /// Runs ensemble steps through the server's inference path.
    pub(super) steps: Arc<dyn StepRunner>,
    /// Explicit model control: loading an ensemble also (re)loads its composing models that do not
    /// serve, as Triton does. In the other modes the repository decides what loads, so an ensemble only
    /// loads a composing model nobody has tried to load yet.
    pub(super) load_composing: bool,
    /// Ensemble load → the model it waits for, so that circular dependencies fail instead of deadlocking.
    pub(super) waits: parking_lot::Mutex<HashMap<String, String>>,
    /// The last generation handed out (see `ModelEntry::generation`).
    pub(super) generations: std::sync::atomic::AtomicU64,
    /// Bumped after every change to the table (a state, a version, a model added or removed), for
    /// front-ends that follow model states (the MQTT bridge's subscriptions and state topic).
    pub(super) changes: tokio::sync::watch::Sender<u64>,
    /// Cloud repositories, whose local views are among `repos`.
    pub(super) remotes: Vec<Arc<dyn RemoteRepository>>,
    /// Explicit model control: a load first brings the model's files from the cloud repositories.
    pub(super) sync_on_load: bool,
}

/// The table, locked for writing; tells the followers of [`ModelManager::changes`] when dropped.
pub(super) struct TableWrite<'a> {
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
            steps: Arc::new(NoSteps),
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

    /// The model folders of the repositories, by key (see [`crate::core::repository::namespace`]).
    pub fn scan(&self) -> (std::collections::BTreeMap<String, Result<PathBuf>>, Vec<Error>) {
        crate::core::repository::scan_ns(&self.repos, self.opts.namespacing)
    }

    /// Locks the table for a change; followers of [`Self::changes`] hear of it once the lock is released.
    pub(super) fn write(&self) -> TableWrite<'_> {
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

    /// Waits for this model's turn: loads and unloads of one model are serialized, as in Triton.
    pub(super) async fn lock_model(&self, name: &str) -> tokio::sync::OwnedMutexGuard<()> {
        let lock = self.locks.lock().entry(name.to_string()).or_default().clone();
        lock.lock_owned().await
    }
}

/// The step runner of a model manager that serves no ensembles (one built without a server).
struct NoSteps;

impl StepRunner for NoSteps {
    fn run(&self, req: InferRequest) -> BoxFuture<'static, Result<ExecResult>> {
        let model = req.model_name;
        Box::pin(async move {
            Err(Error::unavailable(format!("cannot run model '{model}' as an ensemble step: no server is attached")))
        })
    }

    fn run_stream(
        &self,
        req: InferRequest,
    ) -> BoxFuture<'static, Result<futures_util::stream::BoxStream<'static, Result<StreamResponse>>>> {
        let model = req.model_name;
        Box::pin(async move {
            Err(Error::unavailable(format!("cannot run model '{model}' as an ensemble step: no server is attached")))
        })
    }
}
