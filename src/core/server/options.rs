//! What a server is built from: the control mode and the options the command line gives the core.

use crate::core::repository::{RemoteRepository, RepoOptions};
use crate::core::trace::TraceSettings;
use crate::memory::pool::MemorySource;
use crate::memory::regions::CudaIpcOpener;
use crate::model_api::{BackendConfig, BackendFactory};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Triton's `--model-control-mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControlMode {
    /// Load every model at start; no changes afterwards.
    None,
    /// Load `--load-model` at start; load and unload through the API.
    Explicit,
    /// Load everything at start and follow the repository's changes.
    Poll,
}

/// Everything the core needs from the command line.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// Reported as the server name in metadata (`--id`).
    pub id: String,
    pub repositories: Vec<PathBuf>,
    pub control_mode: ControlMode,
    /// Models to load at start in explicit mode; `*` means all.
    pub load_models: Vec<String>,
    pub poll_interval: Duration,
    pub strict_readiness: bool,
    pub exit_on_error: bool,
    pub repo: RepoOptions,
    pub backend_config: BackendConfig,
    /// Builds the backends (the built-in ones, registered by `assemble`); the default builds none.
    pub backends: BackendFactory,
    pub load_threads: usize,
    /// `--rate-limit execution_count` with the `--rate-limit-resource` sizes; `None` when off.
    pub rate_limit: Option<Vec<(String, u32, Option<i32>)>>,
    /// Size of the response cache in bytes (`--cache-config local,size=N`); `None`: no cache.
    pub cache_bytes: Option<usize>,
    /// A TRITONCACHE library holding the response cache instead (`--cache-directory`); it takes
    /// precedence over `cache_bytes`.
    pub cache_library: Option<Arc<dyn crate::core::cache::ExternalCache>>,
    /// Redis holding the response cache instead (`--cache-config redis,...`); it takes precedence over
    /// `cache_bytes`.
    pub cache_redis: Option<Arc<crate::core::cache::RedisCache>>,
    /// The start-up trace settings (`--trace-config`).
    pub trace: TraceSettings,
    /// Where OpenTelemetry mode's spans go (the OTLP exporter the assembly point starts); `None`
    /// leaves only the trace file.
    pub spans: Option<Arc<dyn crate::core::trace::SpanSink>>,
    /// `--pinned-memory-pool-byte-size`, `--cuda-memory-pool-byte-size`.
    pub pools: crate::memory::pool::PoolOptions,
    /// Cloud repositories (`s3://`, `gs://`, `as://`); each one's local view is also in `repositories`.
    pub remotes: Vec<Arc<dyn RemoteRepository>>,
    /// Where memory beyond host memory comes from (the assembly point passes the CUDA driver's).
    pub memory: MemorySources,
}

/// Where memory beyond host memory comes from: the pools' pinned and device allocators, and the
/// opener of CUDA IPC handles for CUDA shared-memory regions. The default has neither: host memory
/// only, and registering a CUDA region says there is no CUDA.
#[derive(Clone, Default)]
pub struct MemorySources {
    pub pools: Option<Arc<dyn MemorySource + Send + Sync>>,
    pub cuda_ipc: Option<CudaIpcOpener>,
}

impl std::fmt::Debug for MemorySources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemorySources")
            .field("pools", &self.pools.is_some())
            .field("cuda_ipc", &self.cuda_ipc.is_some())
            .finish()
    }
}

impl ServerOptions {
    /// A server in explicit mode over `repositories` that loads nothing at start, with every other
    /// setting at its default and no backends (callers add theirs): for `assemble` and for tests.
    pub fn explicit(repositories: Vec<PathBuf>) -> ServerOptions {
        ServerOptions {
            id: "triton".into(),
            repositories,
            control_mode: ControlMode::Explicit,
            load_models: Vec::new(),
            poll_interval: Duration::from_secs(1),
            strict_readiness: true,
            exit_on_error: false,
            repo: Default::default(),
            backend_config: Default::default(),
            backends: Default::default(),
            load_threads: 1,
            rate_limit: None,
            cache_bytes: None,
            cache_library: None,
            cache_redis: None,
            trace: Default::default(),
            spans: None,
            pools: Default::default(),
            remotes: Vec::new(),
            memory: Default::default(),
        }
    }
}
