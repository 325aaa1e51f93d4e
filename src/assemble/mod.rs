//! The one assembly point: turns the parsed configuration (`config`) into the server's options, with
//! the built-in backends and their completers, the repository agents, the cloud repositories and the
//! platform's memory sources. `tritonrs` (serving) and `tritonrs tune` both build their server here;
//! `config` only parses and checks flags, and the core is given everything it runs with.

mod trace;

pub use trace::trace_config;

use crate::config::tune::TuneArgs;
use crate::config::{self, ModelConfigArgs, ServeArgs};
use crate::core::repository::{RemoteRepository, RepoOptions};
use crate::core::{ControlMode, MemorySources, Server, ServerOptions};
use crate::error::{Error, Result};
use crate::model_api::{BackendConfig, BackendFactory};
use crate::storage;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// How model configurations are completed: by the built-in backends' completers and the repository
/// agents. `max_tensor_bytes`: the largest request the server accepts (see
/// `RepoOptions::max_tensor_bytes`).
pub fn repo_options(
    model: &ModelConfigArgs,
    backend_config: &BackendConfig,
    max_tensor_bytes: usize,
) -> Result<RepoOptions> {
    let default_max_batch_size = match backend_config.get("onnxruntime", "default-max-batch-size") {
        Some(v) => {
            v.parse().map_err(|_| Error::invalid(format!("default-max-batch-size must be an integer, got '{v}'")))?
        }
        None => 4,
    };
    Ok(RepoOptions {
        autocomplete: !(model.disable_auto_complete_config || model.strict_model_config),
        default_max_batch_size,
        completers: crate::backend::completers(backend_config)?,
        max_tensor_bytes,
        agents: crate::backend::agents(
            backend_config,
            &BackendConfig::parse_flag(&model.repoagent_config, "--repoagent-config", "agent")?,
        ),
        config_name: model.config_name.model_config_name.clone(),
        load_retry_count: 0,
        host_policies: Default::default(),
        gpu_limits: Default::default(),
        namespacing: model.model_namespacing,
    })
}

/// The memory the platform provides beyond host memory: the CUDA driver's pinned and device
/// allocators, and its opener of CUDA IPC handles (the driver is loaded on first use).
fn memory_sources() -> MemorySources {
    MemorySources {
        pools: Some(Arc::new(crate::platform::cuda::CudaMemory)),
        cuda_ipc: Some(crate::platform::cuda::ipc_opener()),
    }
}

/// The one place `ServerOptions` are made: explicit mode over `repositories`, nothing loaded at start,
/// with the built-in backends, their completers and agents, and the platform's memory. Serving sets
/// the rest from its flags.
fn options(model: &ModelConfigArgs, max_tensor_bytes: usize, repositories: Vec<PathBuf>) -> Result<ServerOptions> {
    let backend_config = model.backend_config()?;
    let repo = repo_options(model, &backend_config, max_tensor_bytes)?;
    let config = backend_config.clone();
    Ok(ServerOptions {
        repo,
        backends: BackendFactory(Arc::new(move |api, pools| crate::backend::builtin(&config, api, pools))),
        backend_config,
        memory: memory_sources(),
        ..ServerOptions::explicit(repositories)
    })
}

/// `--min-supported-compute-capability`: checked, then given to the platform.
pub fn min_compute_capability(min_cc: f64) -> Result<()> {
    if !(min_cc.is_finite() && min_cc >= 0.0) {
        return Err(Error::invalid(format!(
            "--min-supported-compute-capability must be a non-negative number, got {min_cc}"
        )));
    }
    crate::platform::cuda::set_min_compute_capability(min_cc);
    Ok(())
}

fn control_mode(mode: config::ControlMode) -> ControlMode {
    match mode {
        config::ControlMode::None => ControlMode::None,
        config::ControlMode::Explicit => ControlMode::Explicit,
        config::ControlMode::Poll => ControlMode::Poll,
    }
}

/// The options of the server `tritonrs` runs, from its flags. Every flag is checked here, before any
/// port is bound; trace warnings are logged.
pub fn serve_options(args: &ServeArgs) -> Result<ServerOptions> {
    if args.repository.model_repository.is_empty() {
        return Err(Error::invalid("at least one --model-repository is required"));
    }
    let max_tensor_bytes = args.http_max_input_size.max(args.grpc_max_message_size);
    let mut opts = options(&args.model_config, max_tensor_bytes, Vec::new())?;
    let (trace, otel, trace_warnings) = trace::trace_config(args)?;
    for w in trace_warnings {
        tracing::warn!("{w}");
    }
    min_compute_capability(args.memory.min_supported_compute_capability)?;
    (opts.repositories, opts.remotes) = open_repositories(args)?;
    opts.id = args.id.clone();
    opts.control_mode = control_mode(args.model_control_mode);
    opts.load_models = args.load_model.clone();
    opts.poll_interval = Duration::from_secs(args.repository_poll_secs.max(1));
    opts.strict_readiness = args.strict_readiness;
    opts.exit_on_error = args.exit_on_error;
    opts.load_threads = args.model_load_thread_count;
    opts.repo.load_retry_count = args.loading.model_load_retry_count;
    opts.repo.host_policies = Arc::new(crate::platform::affinity::parse_host_policies(&args.loading.host_policy)?);
    opts.repo.gpu_limits = Arc::new(crate::platform::gpu_limit::parse_gpu_limits(&args.loading.model_load_gpu_limit)?);
    if !opts.repo.gpu_limits.is_empty()
        && crate::platform::cuda::usable_gpus().is_empty()
        && crate::platform::jetson::Jetson::detect(&crate::platform::jetson::Jetson::root_from_env()).is_none()
    {
        tracing::info!("--model-load-gpu-limit has nothing to limit: this machine has no GPU.");
    }
    opts.rate_limit = if crate::core::rate_limiter::parse_mode(&args.rate_limit)? {
        Some(
            args.rate_limit_resource
                .iter()
                .map(|r| crate::core::rate_limiter::parse_resource(r))
                .collect::<Result<_>>()?,
        )
    } else {
        None
    };
    match response_cache(args)? {
        CacheChoice::Local(bytes) => opts.cache_bytes = bytes,
        CacheChoice::Redis(redis) => opts.cache_redis = Some(redis),
        CacheChoice::Library(library) => opts.cache_library = Some(library),
    }
    if let Some(otel) = &otel {
        opts.spans = Some(crate::telemetry::OtlpSink::start(otel)?);
    }
    opts.trace = trace;
    opts.pools = args.memory.pool_options();
    // After the flags are checked and before any port is bound: a repository that cannot be read is a
    // start-up error, said once.
    for r in args.repository.model_repository.iter().filter(|r| !storage::is_cloud(&r.to_string_lossy())) {
        if let Err(e) = std::fs::read_dir(r) {
            return Err(Error::invalid(format!("cannot read model repository '{}': {e}", r.display())));
        }
    }
    Ok(opts)
}

/// The cloud repositories, each readable through its local view.
type Remotes = Vec<Arc<dyn RemoteRepository>>;

/// The response cache `--cache-config` and `--cache-directory` ask for.
enum CacheChoice {
    /// The built-in LRU's size (`None`: no cache).
    Local(Option<usize>),
    Redis(Arc<crate::core::cache::RedisCache>),
    Library(Arc<dyn crate::core::cache::ExternalCache>),
}

/// The response cache `--cache-config` and `--cache-directory` ask for: the built-in LRU's size, Redis,
/// or a TRITONCACHE library, loaded and initialized now (one that cannot be is a start-up error, as in
/// tritonserver). `local` stays the built-in cache unless `--cache-directory` was given and holds a
/// `local` library: Triton's own library then runs, as tritonserver would run it. `redis` is always
/// tritonrs's own, whatever the cache directory holds.
fn response_cache(args: &ServeArgs) -> Result<CacheChoice> {
    let legacy = args.response_cache_byte_size.filter(|&n| n > 0);
    let Some(spec) = crate::core::cache::parse_cache_config(&args.cache_config)? else {
        return Ok(CacheChoice::Local(legacy));
    };
    let dir = args.cache_directory.clone().unwrap_or_else(|| crate::backend::DEFAULT_CACHE_DIRECTORY.into());
    let library = dir.join(&spec.name).join(format!("libtritoncache_{}.so", spec.name));
    if spec.name == "redis" {
        if library.is_file() {
            tracing::info!("Response cache: tritonrs's own Redis cache serves; '{}' is not loaded.", library.display());
        }
        return redis_cache(&spec.settings).map(CacheChoice::Redis);
    }
    if spec.name == "local" && !(args.cache_directory.is_some() && library.is_file()) {
        return Ok(CacheChoice::Local(spec.local_size()?.or(legacy)));
    }
    let cache = crate::backend::cache_library(&library, &spec.name, &spec.config_json())?;
    Ok(CacheChoice::Library(cache))
}

/// The Redis cache, its settings checked and Redis asked once: a Redis that answers but refuses the
/// settings (password, user, db, TLS certificate) stops the start, as in tritonserver; one that does
/// not answer does not (tritonserver would not start): an appliance serves without its cache until
/// Redis is up.
fn redis_cache(settings: &[(String, String)]) -> Result<Arc<crate::core::cache::RedisCache>> {
    use crate::core::cache::redis::{ConnectError, RedisCache, RedisSettings};
    let settings = RedisSettings::parse(settings, |name| std::env::var(name).ok())?;
    let address = settings.address();
    let reachable = match crate::core::cache::redis::probe(&settings) {
        Ok(()) => {
            tracing::info!("Response cache: Redis at {address} (db {}).", settings.db);
            true
        }
        Err(ConnectError::Refused(why)) => {
            return Err(Error::invalid(format!("Failed to initialize the Redis cache at {address}: {why}")));
        }
        Err(ConnectError::Unreachable(why)) => {
            tracing::warn!(
                "The Redis cache at {address} is unreachable ({why}); the server starts without it, requests \
                 run as misses, and the cache is used as soon as Redis answers."
            );
            false
        }
    };
    Ok(RedisCache::new(settings, reachable))
}

/// The repositories as the core sees them (a cloud repository by its local view), and the cloud ones.
/// A malformed URL, an unreadable credential file or a cache folder that cannot be made stop the
/// server; the storage being unreachable does not (it is only contacted once serving begins).
fn open_repositories(args: &ServeArgs) -> Result<(Vec<PathBuf>, Remotes)> {
    let any_cloud = args.repository.model_repository.iter().any(|r| storage::is_cloud(&r.to_string_lossy()));
    if !any_cloud {
        return Ok((args.repository.model_repository.clone(), Vec::new()));
    }
    let credentials = match &args.cloud_credential_path {
        Some(p) => storage::CredentialFile::load(p)?,
        None => Default::default(),
    };
    let cache = args.repository_cache_dir.clone().unwrap_or_else(storage::default_cache_dir);
    let mut local = Vec::new();
    let mut remotes: Remotes = Vec::new();
    for r in &args.repository.model_repository {
        let text = r.to_string_lossy();
        if !storage::is_cloud(&text) {
            local.push(r.clone());
            continue;
        }
        let repo = storage::CloudRepository::open(&text, &credentials, &cache, args.repository_max_file_mb << 20)?;
        tracing::info!("Model repository '{}' is cached in '{}'.", repo.url(), repo.local_dir().display());
        local.push(repo.local_dir().to_path_buf());
        remotes.push(Arc::new(repo));
    }
    Ok((local, remotes))
}

/// The server `tritonrs tune` measures in-process: over the repository with nothing loaded, since
/// tuning loads each variant itself.
pub async fn tune_server(args: &TuneArgs) -> Result<Server> {
    let mut opts = options(&args.model_config, 64 << 20, args.repository.model_repository.clone())?;
    opts.id = "tritonrs-tune".into();
    opts.strict_readiness = false;
    let server = Server::new(opts);
    server.startup().await?;
    Ok(server)
}
