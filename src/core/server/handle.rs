//! The server handle: its shared state, readiness (start-up done, accepting, strict readiness) and
//! the parts front-ends reach directly (memory pools, shared memory, metrics, tracing).

use super::options::ServerOptions;
use crate::core::cache::ResponseCache;
use crate::core::lifecycle::ModelManager;
use crate::core::repository::RemoteRepository;
use crate::core::trace::Tracer;
use crate::error::{Error, Result};
use crate::memory::regions::SharedMemoryManager;
use crate::model_api::custom_metrics::CustomMetrics;
use futures_util::stream::{BoxStream, StreamExt};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

pub(super) struct Inner {
    pub(super) opts: ServerOptions,
    pub(super) models: Arc<ModelManager>,
    /// Set once start-up loading has finished.
    pub(super) started: AtomicBool,
    /// Cleared when shutdown begins.
    pub(super) accepting: AtomicBool,
    /// Bumped when `started` or `accepting` changes, for [`Server::readiness`].
    pub(super) flags_changed: tokio::sync::watch::Sender<u64>,
    /// The response cache, when configured.
    pub(super) cache: Option<ResponseCache>,
    /// The trace extension's settings and sampling.
    pub(super) tracer: Tracer,
    /// Metrics models create (Python's `pb_utils.MetricFamily`).
    pub(super) custom_metrics: Arc<CustomMetrics>,
    /// The system and CUDA shared-memory regions clients registered.
    pub(super) shm: SharedMemoryManager,
    /// Pinned host memory and device memory per GPU.
    pub(super) pools: crate::memory::pool::Pools,
}

/// The server core. Cheap to clone; every front-end holds one.
#[derive(Clone)]
pub struct Server {
    pub(super) inner: Arc<Inner>,
}

/// Parses a version as it appears in URLs and protocol fields; empty means "let the server choose".
pub fn parse_version(v: &str) -> Result<Option<i64>> {
    if v.is_empty() {
        return Ok(None);
    }
    v.parse::<i64>()
        .ok()
        .filter(|&n| n >= 0)
        .map(Some)
        .ok_or_else(|| Error::invalid(format!("'{v}' is not a valid model version: expected a non-negative integer")))
}

impl Server {
    /// Whether start-up loading has finished (whatever its outcome).
    pub fn is_started(&self) -> bool {
        self.inner.started.load(Ordering::SeqCst)
    }

    pub fn is_live(&self) -> bool {
        true
    }

    /// Readiness as Triton defines it: start-up done, accepting requests, and with `--strict-readiness`
    /// every model that should be served is READY.
    pub fn is_ready(&self) -> bool {
        self.inner.started.load(Ordering::SeqCst)
            && self.inner.accepting.load(Ordering::SeqCst)
            && (!self.inner.opts.strict_readiness || self.inner.models.all_ready())
    }

    /// Readiness now, then each time it changes (start-up finishing, shutdown beginning, and under
    /// `--strict-readiness` a model's state), for front-ends that push it (gRPC health `Watch`). The
    /// stream holds no strong handle: it ends when the server is dropped.
    pub fn readiness(&self) -> BoxStream<'static, bool> {
        let changes = (self.inner.flags_changed.subscribe(), self.inner.models.changes());
        let state = (Arc::downgrade(&self.inner), changes, None);
        futures_util::stream::unfold(state, |(inner, mut changes, last)| async move {
            loop {
                if last.is_some() {
                    let (flags, models) = &mut changes;
                    let open = tokio::select! {
                        r = flags.changed() => r.is_ok(),
                        r = models.changed() => r.is_ok(),
                    };
                    if !open {
                        return None;
                    }
                }
                let ready = Server { inner: inner.upgrade()? }.is_ready();
                if last != Some(ready) {
                    return Some((ready, (inner, changes, Some(ready))));
                }
            }
        })
        .boxed()
    }

    /// Stops readiness (for shutdown); requests in flight continue.
    pub fn stop_accepting(&self) {
        self.inner.accepting.store(false, Ordering::SeqCst);
        self.inner.flags_changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// The cloud repositories, for their download counters.
    pub fn remote_repositories(&self) -> &[Arc<dyn RemoteRepository>] {
        self.inner.models.remotes()
    }

    /// The memory pools (pinned host memory, device memory per GPU).
    pub fn pools(&self) -> &crate::memory::pool::Pools {
        &self.inner.pools
    }

    /// The shared-memory regions (system and CUDA) clients registered: register, unregister, status.
    pub fn shared_memory(&self) -> &SharedMemoryManager {
        &self.inner.shm
    }

    /// The metrics models created, for `/metrics`.
    pub fn custom_metrics(&self) -> &CustomMetrics {
        &self.inner.custom_metrics
    }

    /// The trace extension's hot-path API: whether tracing is on, and sampling a request.
    pub fn tracer(&self) -> &Tracer {
        &self.inner.tracer
    }
}

#[cfg(test)]
mod tests;
