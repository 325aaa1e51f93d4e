//! Building a server: its memory pools, backends, model manager and the weak handles through which
//! ensembles and backends call back into it.

use super::bridges::{ApiThroughServer, StepsThroughServer};
use super::handle::{Inner, Server};
use super::options::{ControlMode, ServerOptions};
use crate::core::cache::ResponseCache;
use crate::core::lifecycle::ModelManager;
use crate::core::rate_limiter::RateLimiter;
use crate::core::trace::Tracer;
use crate::memory::pool::{Allocator, GpuMemory, MemorySource, Pools};
use crate::memory::regions::SharedMemoryManager;
use crate::model_api::custom_metrics::CustomMetrics;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Weak};

impl Server {
    pub fn new(opts: ServerOptions) -> Server {
        let limiter = opts.rate_limit.as_ref().map(|fixed| Arc::new(RateLimiter::new(fixed)));
        let tracer = Tracer::with_spans(opts.trace.clone(), opts.spans.clone());
        // Ensembles run their steps through this server; a weak handle keeps the models from owning it.
        let pools = match &opts.memory.pools {
            Some(source) => Pools::new(&opts.pools, source.as_ref()),
            None => Pools::new(&opts.pools, &HostOnly),
        };
        let inner = Arc::new_cyclic(|me: &Weak<Inner>| {
            let steps = Arc::new(StepsThroughServer(me.clone()));
            let backends = opts.backends.build(Some(Arc::new(ApiThroughServer(me.clone()))), Some(pools.clone()));
            let models = ModelManager::new(opts.repositories.clone(), opts.repo.clone(), backends, opts.load_threads)
                .with_rate_limiter(limiter)
                .with_ensembles(steps, opts.control_mode == ControlMode::Explicit)
                .with_remotes(opts.remotes.clone(), opts.control_mode == ControlMode::Explicit);
            // CUDA regions open their IPC handles through the opener given (the driver's, loaded on first
            // use, says why when there is no driver).
            let shm =
                SharedMemoryManager::new(opts.memory.cuda_ipc.clone(), "this server was built without CUDA".into());
            Inner {
                shm,
                cache: match (&opts.cache_library, &opts.cache_redis, opts.cache_bytes) {
                    (Some(library), _, _) => Some(ResponseCache::external(library.clone())),
                    (None, Some(redis), _) => Some(ResponseCache::redis(redis.clone())),
                    (None, None, bytes) => bytes.map(ResponseCache::new),
                },
                opts,
                models: Arc::new(models),
                started: AtomicBool::new(false),
                accepting: AtomicBool::new(true),
                flags_changed: tokio::sync::watch::Sender::new(0),
                tracer,
                custom_metrics: Arc::new(CustomMetrics::new()),
                pools,
            }
        });
        Server { inner }
    }
}

/// No memory source: host memory only (a server built without the platform's, as in tests).
struct HostOnly;

impl MemorySource for HostOnly {
    fn pinned(&self) -> Option<Box<dyn Allocator>> {
        None
    }

    fn devices(&self) -> Vec<GpuMemory> {
        Vec::new()
    }
}
