//! The `tritonrs` binary: parse flags, then serve or validate.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
use tritonrs::config::file::ConfigFile;
use tritonrs::config::{self, CliError, Command, ServeArgs, ValidateArgs};
use tritonrs::core::repository::RemoteRepository;
use tritonrs::core::{repository, Server, ServerOptions};
use tritonrs::frontend::conn::{self, ConnLimits, GuardedListener};
use tritonrs::frontend::restrict::Restrictions;
use tritonrs::frontend::tls::{TlsFiles, TlsListener};
use tritonrs::frontend::{grpc, http, metrics};
use tritonrs::logging::{self, LogSettings};
use tritonrs::platform::systemd;
use tritonrs::storage;

fn main() -> ExitCode {
    let (cli, file) = match config::parse(std::env::args_os().collect()) {
        Ok(parsed) => parsed,
        Err(CliError::Clap(e)) => e.exit(),
        Err(CliError::File(e)) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    match cli.command {
        Some(Command::Validate(args)) => validate(args),
        Some(Command::EncryptModel(args)) => encrypt_model(args),
        Some(Command::Tune(args)) => {
            // Warnings only: the model loads' info lines would bury the progress and the results.
            let settings = LogSettings { log_info: false, ..Default::default() };
            if let Err(e) = logging::init(settings) {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
            tritonrs::tune::cli::main(*args)
        }
        None => serve(cli.serve, file),
    }
}

/// `tritonrs encrypt-model`: an encrypted copy of a model folder for the `decrypt` agent.
fn encrypt_model(args: tritonrs::config::EncryptModelArgs) -> ExitCode {
    use tritonrs::backend::agents::decrypt;
    let output = args.output.unwrap_or_else(|| {
        let mut name = args.dir.file_name().map(|n| n.to_os_string()).unwrap_or_else(|| "model".into());
        name.push(".encrypted");
        args.dir.with_file_name(name)
    });
    let result = decrypt::read_key(&args.key_file)
        .and_then(|key| decrypt::encrypt_model(&args.dir, &output, &key, decrypt::DEFAULT_CHUNK));
    match result {
        Ok(n) => {
            println!("Encrypted {n} files of '{}' into '{}'.", args.dir.display(), output.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {}", e.message);
            ExitCode::FAILURE
        }
    }
}

/// `tritonrs validate`: one line per model, exit 1 if any is invalid.
fn validate(args: ValidateArgs) -> ExitCode {
    if args.model_repository.is_empty() {
        eprintln!(
            "error: no model repository: give --model-repository, TRITONRS_MODEL_REPOSITORY or model-repository in \
             the configuration file"
        );
        return ExitCode::FAILURE;
    }
    let backend_config = match args.model_config.backend_config() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let opts =
        match args.model_config.repo_options(&backend_config, args.http_max_input_size.max(args.grpc_max_message_size))
        {
            Ok(o) => o,
            Err(e) => {
                eprintln!("error: {e:#}");
                return ExitCode::FAILURE;
            }
        };
    let (cloud, local): (Vec<PathBuf>, Vec<PathBuf>) =
        args.model_repository.iter().cloned().partition(|r| storage::is_cloud(&r.to_string_lossy()));
    let (models, errors) = repository::scan(&local);
    let mut bad = errors.len();
    // The unit's ExecStartPre runs validate: a cloud repository is checked when the server fetches it.
    for r in &cloud {
        println!("SKIP  '{}' is a cloud repository: its models are checked as the server loads them", r.display());
    }
    for e in &errors {
        println!("ERROR {}", e.message);
    }
    let mut results: std::collections::BTreeMap<String, tritonrs::error::Result<_>> = models
        .iter()
        .map(|(name, dir)| {
            let result = dir.as_ref().map_err(Clone::clone).and_then(|d| {
                let cfg = repository::read_model_config(d, name, &opts, None)?;
                repository::check_model_files(&cfg, d)?;
                let versions = tritonrs::model_config::list_versions(d);
                if repository::VersionPolicy::from_config(&cfg).select(&versions).is_empty() {
                    return Err(tritonrs::error::Error::invalid(format!(
                        "model '{name}' has no version folders to serve in '{}'",
                        d.display()
                    )));
                }
                Ok(cfg)
            });
            (name.clone(), result)
        })
        .collect();
    // Ensembles are checked against their composing models' configurations, as the server does when
    // it loads them.
    // (Not with cloud repositories, which may hold the composing models.)
    let ensemble_errors: Vec<(String, tritonrs::error::Error)> = results
        .iter()
        .filter(|_| cloud.is_empty())
        .filter_map(|(name, r)| match r {
            Ok(cfg) if cfg.platform == "ensemble" => {
                repository::check_ensemble_in_repository(cfg, &results).err().map(|e| (name.clone(), e))
            }
            _ => None,
        })
        .collect();
    for (name, e) in ensemble_errors {
        results.insert(name, Err(e));
    }
    for (name, result) in results {
        match result {
            Ok(cfg) => {
                println!("OK    {name}");
                if args.print_config {
                    for line in tritonrs::model_config::pbtxt::config_to_pbtxt(&cfg).lines() {
                        println!("      {line}");
                    }
                }
            }
            Err(e) => {
                bad += 1;
                println!("FAIL  {name}: {}", e.message);
            }
        }
    }
    if models.is_empty() && errors.is_empty() {
        println!("no models found");
    }
    if bad > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

fn serve(args: ServeArgs, file: Option<ConfigFile>) -> ExitCode {
    let log = match logging::init(LogSettings {
        log_file: args.log_file.as_ref().map(|p| p.display().to_string()).unwrap_or_default(),
        log_info: args.log_info,
        log_warning: args.log_warning,
        log_error: args.log_error,
        log_verbose_level: args.log_verbose,
        log_format: args.log_format.clone(),
    }) {
        Ok(log) => log,
        Err(e) => {
            eprintln!("error: {e:#}");
            return ExitCode::FAILURE;
        }
    };
    let log_errors = args.log_error;
    match serve_logged(args, file, log) {
        Ok(()) => ExitCode::SUCCESS,
        // Said once: in the log, or on stderr when error logging is off.
        Err(e) if log_errors => {
            tracing::error!("{e:#}");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn serve_logged(args: ServeArgs, file: Option<ConfigFile>, log: logging::LogControl) -> anyhow::Result<()> {
    if let Some(f) = &file {
        tracing::info!("Read the configuration file '{}'.", f.path.display());
    }
    if args.model_repository.is_empty() {
        anyhow::bail!("at least one --model-repository is required");
    }
    let backend_config = args.model_config.backend_config()?;
    let repo =
        args.model_config.repo_options(&backend_config, args.http_max_input_size.max(args.grpc_max_message_size))?;
    let (trace, trace_warnings) = args.trace_settings()?;
    for w in trace_warnings {
        tracing::warn!("{w}");
    }
    let min_cc = args.memory.min_supported_compute_capability;
    if !(min_cc.is_finite() && min_cc >= 0.0) {
        anyhow::bail!("--min-supported-compute-capability must be a non-negative number, got {min_cc}");
    }
    tritonrs::platform::cuda::set_min_compute_capability(min_cc);
    let (repositories, remotes) = open_repositories(&args)?;
    let opts = ServerOptions {
        id: args.id.clone(),
        repositories,
        remotes,
        control_mode: args.model_control_mode,
        load_models: args.load_model.clone(),
        poll_interval: Duration::from_secs(args.repository_poll_secs.max(1)),
        strict_readiness: args.strict_readiness,
        exit_on_error: args.exit_on_error,
        repo,
        backends: {
            let config = backend_config.clone();
            tritonrs::model_api::BackendFactory(Arc::new(move |api, pools| {
                tritonrs::backend::builtin(&config, api, pools)
            }))
        },
        backend_config,
        load_threads: args.model_load_thread_count,
        rate_limit: if tritonrs::core::rate_limiter::parse_mode(&args.rate_limit)? {
            Some(
                args.rate_limit_resource
                    .iter()
                    .map(|r| tritonrs::core::rate_limiter::parse_resource(r))
                    .collect::<Result<_, _>>()?,
            )
        } else {
            None
        },
        cache_bytes: tritonrs::core::cache::parse_cache_config(&args.cache_config)?
            .or(args.response_cache_byte_size.filter(|&n| n > 0)),
        trace,
        pools: args.memory.pool_options(),
    };
    // After the flags are checked and before any port is bound: a repository that cannot be read is a
    // start-up error, said once.
    for r in args.model_repository.iter().filter(|r| !storage::is_cloud(&r.to_string_lossy())) {
        if let Err(e) = std::fs::read_dir(r) {
            anyhow::bail!("cannot read model repository '{}': {e}", r.display());
        }
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().thread_name("tritonrs-io").build()?;
    runtime.block_on(run(args, file, opts, log))
}

/// The repositories as the core sees them (a cloud repository by its local view), and the cloud ones.
/// A malformed URL, an unreadable credential file or a cache folder that cannot be made stop the
/// server; the storage being unreachable does not (it is only contacted once serving begins).
type Remotes = Vec<Arc<dyn RemoteRepository>>;

fn open_repositories(args: &ServeArgs) -> anyhow::Result<(Vec<PathBuf>, Remotes)> {
    let any_cloud = args.model_repository.iter().any(|r| storage::is_cloud(&r.to_string_lossy()));
    if !any_cloud {
        return Ok((args.model_repository.clone(), Vec::new()));
    }
    let credentials = match &args.cloud_credential_path {
        Some(p) => storage::CredentialFile::load(p).map_err(|e| anyhow::anyhow!(e))?,
        None => Default::default(),
    };
    let cache = args.repository_cache_dir.clone().unwrap_or_else(storage::default_cache_dir);
    let mut local = Vec::new();
    let mut remotes: Remotes = Vec::new();
    for r in &args.model_repository {
        let text = r.to_string_lossy();
        if !storage::is_cloud(&text) {
            local.push(r.clone());
            continue;
        }
        let repo = storage::CloudRepository::open(&text, &credentials, &cache, args.repository_max_file_mb << 20)
            .map_err(|e| anyhow::anyhow!(e))?;
        tracing::info!("Model repository '{}' is cached in '{}'.", repo.url(), repo.local_dir().display());
        local.push(repo.local_dir().to_path_buf());
        remotes.push(Arc::new(repo));
    }
    Ok((local, remotes))
}

/// A front-end server running in the background; its result says how it ended.
type ServerTask = (&'static str, tokio::task::JoinHandle<Result<(), String>>);

/// Connections the kernel queues for a listener before it accepts them (capped by net.core.somaxconn).
const LISTEN_BACKLOG: u32 = 1024;

/// Binds `address:port` (port 0 picks a free one) and logs Triton's `Started <service> at ADDR:PORT`.
async fn bind(address: &str, port: u16, service: &str, flags: &str) -> anyhow::Result<tokio::net::TcpListener> {
    let addr: SocketAddr = format!("{address}:{port}").parse().map_err(|e| anyhow::anyhow!("invalid {flags}: {e}"))?;
    let socket = if addr.is_ipv4() { tokio::net::TcpSocket::new_v4() } else { tokio::net::TcpSocket::new_v6() };
    // A deeper backlog than the standard library's 128: at a connection cap, newcomers wait there.
    let listener = socket
        .and_then(|s| {
            s.set_reuseaddr(true)?;
            s.bind(addr)?;
            s.listen(LISTEN_BACKLOG)
        })
        .map_err(|e| anyhow::anyhow!("cannot bind {service} to {addr}: {e}"))?;
    tracing::info!("Started {service} at {}", listener.local_addr()?);
    Ok(listener)
}

/// Resolves when shutdown begins.
async fn stopping(mut rx: tokio::sync::watch::Receiver<bool>) {
    let _ = rx.wait_for(|s| *s).await;
}

/// The layers every axum app gets: a pause in a request body longer than the header timeout fails the
/// request, and requests are tracked on their connections.
fn guarded_app(app: axum::Router, header_timeout: Option<Duration>) -> axum::Router {
    let app = match header_timeout {
        Some(t) => app.layer(tower::util::MapRequestLayer::new(move |req: axum::extract::Request| {
            req.map(|body| axum::body::Body::new(conn::TimedBody::new(body, t)))
        })),
        None => app,
    };
    app.layer(conn::TrackLayer)
}

/// Serves an axum app on a guarded listener (plain or TLS) until shutdown begins, then lets open
/// requests finish.
fn serve_axum<L>(
    listener: L,
    header_timeout: Option<Duration>,
    app: axum::Router,
    stop: tokio::sync::watch::Receiver<bool>,
) -> tokio::task::JoinHandle<Result<(), String>>
where
    L: axum::serve::Listener<Addr = conn::Conn>,
    conn::Conn: for<'a> axum::extract::connect_info::Connected<axum::serve::IncomingStream<'a, L>>,
{
    let app = guarded_app(app, header_timeout).into_make_service_with_connect_info::<conn::Conn>();
    tokio::spawn(async move {
        axum::serve(listener, app).with_graceful_shutdown(stopping(stop)).await.map_err(|e| e.to_string())
    })
}

/// A duration flag in seconds or milliseconds where 0 means "no limit".
fn limit(d: Duration) -> Option<Duration> {
    (!d.is_zero()).then_some(d)
}

/// The connection limits of each listener, after raising the open-file limit they are derived from.
fn connection_limits(args: &ServeArgs) -> [ConnLimits; 3] {
    let open_files = conn::raise_open_file_limit();
    let auto = conn::auto_max_connections(open_files, args.allow_http as usize + args.allow_grpc as usize);
    let pick = |flag: usize| if flag > 0 { flag } else { auto };
    let header = limit(Duration::from_secs(args.http_header_timeout_secs));
    let http = ConnLimits {
        name: "HTTP",
        cap_flag: "--http-max-connections",
        max_connections: pick(args.http_max_connections),
        header_timeout: header,
        idle_timeout: limit(Duration::from_secs(args.http_idle_timeout_secs)),
        max_lifetime: None,
        http2: false,
    };
    let grpc = ConnLimits {
        name: "gRPC",
        cap_flag: "--grpc-max-connections",
        max_connections: pick(args.grpc_max_connections),
        header_timeout: limit(Duration::from_secs(args.grpc_header_timeout_secs)),
        idle_timeout: None,
        // tonic sends GOAWAY at the age; the grace's end is enforced here (tonic would skip the GOAWAY).
        max_lifetime: args
            .grpc_max_connection_age
            .zip(args.grpc_max_connection_age_grace)
            .map(|(age, grace)| Duration::from_millis(age.saturating_add(grace))),
        http2: true,
    };
    let metrics = ConnLimits {
        name: "metrics",
        cap_flag: "a fixed cap",
        max_connections: conn::METRICS_MAX_CONNECTIONS,
        ..http.clone()
    };
    if let Some(n) = open_files {
        let wanted = [(args.allow_http, &http), (args.allow_grpc, &grpc), (args.allow_metrics, &metrics)]
            .iter()
            .filter(|(on, _)| *on)
            .map(|(_, l)| l.max_connections as u64)
            .sum::<u64>();
        if wanted + conn::RESERVED_FDS > n {
            tracing::warn!(
                "The connection caps ({wanted} in all) leave fewer than {} of the {n} open files for the rest \
                 of the server; when descriptors run out, new connections wait.",
                conn::RESERVED_FDS
            );
        }
    }
    [http, grpc, metrics]
}

async fn run(
    args: ServeArgs,
    file: Option<ConfigFile>,
    opts: ServerOptions,
    log: logging::LogControl,
) -> anyhow::Result<()> {
    let http_tls = TlsFiles::from_flags(
        "http",
        args.http_use_ssl,
        args.http_use_ssl_mutual,
        args.http_server_cert.as_deref(),
        args.http_server_key.as_deref(),
        args.http_root_cert.as_deref(),
    )
    .map_err(|e| anyhow::anyhow!(e))?;
    let http_tls = http_tls.map(|t| t.server_config()).transpose().map_err(|e| anyhow::anyhow!(e))?;
    let grpc_tls = TlsFiles::from_flags(
        "grpc",
        args.grpc_use_ssl,
        args.grpc_use_ssl_mutual,
        args.grpc_server_cert.as_deref(),
        args.grpc_server_key.as_deref(),
        args.grpc_root_cert.as_deref(),
    )
    .map_err(|e| anyhow::anyhow!(e))?;
    // Read once, now, so a missing file stops the start instead of the gRPC server.
    let grpc_tls = grpc_tls.map(|t| t.pem()).transpose().map_err(|e| anyhow::anyhow!(e))?;
    let http_restricted = Restrictions::parse(&args.http_restricted_api, "--http-restricted-api", false)
        .map_err(|e| anyhow::anyhow!(e))?;
    let grpc_restricted = Restrictions::parse(&args.grpc_restricted_protocol, "--grpc-restricted-protocol", true)
        .map_err(|e| anyhow::anyhow!(e))?;
    let mqtt_settings = tritonrs::frontend::mqtt::Settings::from_args(&args.mqtt).map_err(|e| anyhow::anyhow!(e))?;
    let mqtt_metrics =
        mqtt_settings.as_ref().map(|_| Arc::new(tritonrs::frontend::mqtt::metrics::MqttMetrics::default()));
    let frigate_settings = tritonrs::frontend::frigate::FrigateSettings::from_args(&args.frigate, &opts.repositories)
        .map_err(|e| anyhow::anyhow!(e))?;
    let frigate_metrics =
        frigate_settings.as_ref().map(|_| Arc::new(tritonrs::frontend::frigate::metrics::FrigateMetrics::default()));
    let server = Server::new(opts);
    // From the start, so a SIGHUP while models load is kept for later instead of killing the server.
    let hangups = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    // The front-ends come up first so liveness answers while models load; readiness waits for start-up.
    let mut tasks: Vec<ServerTask> = Vec::new();
    let [http_limits, grpc_limits, metrics_limits] = connection_limits(&args);
    if args.allow_http {
        let listener = bind(&args.http_address, args.http_port, "HTTPService", "--http-address/--http-port").await?;
        let listener = GuardedListener::new(listener, http_limits);
        let state = http::HttpState {
            server: server.clone(),
            log: log.clone(),
            max_body: args.http_max_input_size,
            restricted: http_restricted,
            deepstack_detection_model: args.deepstack_detection_model.clone(),
        };
        let header_timeout = listener.limits().header_timeout;
        let task = match http_tls {
            Some(config) => {
                serve_axum(TlsListener::new(listener, config), header_timeout, http::router(state), stop_rx.clone())
            }
            None => serve_axum(listener, header_timeout, http::router(state), stop_rx.clone()),
        };
        tasks.push(("HTTP", task));
    }
    if args.allow_grpc {
        let listener =
            bind(&args.grpc_address, args.grpc_port, "GRPCInferenceService", "--grpc-address/--grpc-port").await?;
        let listener = GuardedListener::new(listener, grpc_limits);
        let state = grpc::GrpcState {
            server: server.clone(),
            log: log.clone(),
            max_message_size: args.grpc_max_message_size,
            restricted: grpc_restricted,
        };
        let http2 = grpc::Http2Options {
            keepalive_interval: limit(Duration::from_millis(args.grpc_keepalive_time)),
            keepalive_timeout: Duration::from_millis(args.grpc_keepalive_timeout),
            max_connection_age: args.grpc_max_connection_age.map(Duration::from_millis),
        };
        let serving = grpc::serve(listener, state, http2, grpc_tls, stopping(stop_rx.clone()));
        tasks.push(("gRPC", tokio::spawn(async move { serving.await.map_err(|e| e.to_string()) })));
    }
    if args.allow_metrics {
        let listener =
            bind(&args.metrics_address, args.metrics_port, "Metrics Service", "--metrics-address/--metrics-port")
                .await?;
        let listener = GuardedListener::new(listener, metrics_limits);
        let cpu = if args.allow_cpu_metrics {
            Some(tritonrs::platform::CpuMonitor::start(Duration::from_millis(args.metrics_interval_ms))?)
        } else {
            None
        };
        let gpu = if args.allow_gpu_metrics {
            tritonrs::platform::gpu::GpuMonitor::start(Duration::from_millis(args.metrics_interval_ms))?
        } else {
            None
        };
        let app = metrics::router(metrics::MetricsState {
            server: server.clone(),
            cpu,
            gpu,
            mqtt: mqtt_metrics.clone(),
            frigate: frigate_metrics.clone(),
        });
        let header_timeout = listener.limits().header_timeout;
        tasks.push(("metrics", serve_axum(listener, header_timeout, app, stop_rx.clone())));
    }
    if let (Some(settings), Some(m)) = (frigate_settings, frigate_metrics) {
        use tritonrs::frontend::frigate;
        let socket = frigate::bind(&settings, &server, &m).await.map_err(|e| anyhow::anyhow!(e))?;
        let serving = frigate::serve(socket, settings, server.clone(), m, stop_rx.clone());
        tasks.push(("Frigate ZMQ", tokio::spawn(async move { serving.await.map_err(|e| e.to_string()) })));
    }
    // The bridge subscribes to each model's requests as it becomes READY.
    let bridge = match (mqtt_settings, mqtt_metrics) {
        (Some(settings), Some(m)) => Some(tritonrs::frontend::mqtt::Bridge::start(settings, server.clone(), m)),
        _ => None,
    };
    if let Some(interval) = systemd::watchdog_interval() {
        tokio::spawn(systemd::watchdog(interval, tritonrs::core::heartbeat::stalled));
    }
    let loading = systemd::enabled().then(|| tokio::spawn(report_loading(server.clone())));
    tokio::select! {
        r = server.startup() => {
            if let Some(task) = loading {
                task.abort();
            }
            r.map_err(|e| anyhow::anyhow!("{}", e.message))?;
            systemd::ready(&log_readiness(&server));
            if args.model_control_mode == tritonrs::core::ControlMode::Poll {
                tokio::spawn(server.clone().poll_repositories());
            }
            tokio::select! {
                _ = shutdown_signal() => {}
                _ = reload_on_hangup(hangups, &server, &log, file) => {}
            }
        }
        _ = shutdown_signal() => {}
    }
    // Stop accepting, let in-flight requests finish, unload every model; a second signal exits at once.
    systemd::stopping();
    let timeout = Duration::from_secs(args.exit_timeout_secs);
    if let Some(b) = bridge {
        // Its requests in progress finish while the core still accepts them; then `offline`.
        b.stop(timeout.min(Duration::from_secs(10))).await;
    }
    server.stop_accepting();
    let _ = stop_tx.send(true);
    let drain = async {
        for (name, task) in tasks {
            match task.await {
                Ok(Err(e)) => tracing::error!("The {name} server failed while shutting down: {e}"),
                Err(e) => tracing::error!("The {name} server task failed: {e}"),
                Ok(Ok(())) => {}
            }
        }
        server.unload_all().await;
    };
    let cut_short = tokio::select! {
        r = tokio::time::timeout(timeout, drain) => {
            if r.is_err() {
                tracing::warn!("In-flight work did not finish within --exit-timeout-secs={}; exiting anyway.", args.exit_timeout_secs);
            }
            r.is_err()
        }
        _ = shutdown_signal() => {
            tracing::warn!("Second shutdown signal received; exiting now.");
            true
        }
    };
    // Buffered traces are written and the trace file's JSON array is closed, whichever way we stop.
    server.tracer().shutdown();
    tracing::info!("Server stopped.");
    if cut_short {
        // Instance threads may still be running inside a backend library: a normal exit would tear
        // the library's static objects down under them.
        tritonrs::platform::exit_now(0);
    }
    Ok(())
}

/// Says whether the server is ready once start-up is over, and if not, which models keep it from being.
/// Returns the same in short, for systemd's status line.
fn log_readiness(server: &Server) -> String {
    let loaded = server.repository_index(true).len();
    if server.is_ready() {
        tracing::info!("Server is ready: {loaded} model version(s) loaded.");
        return format!("serving: {loaded} model version(s) ready");
    }
    let failed: Vec<String> = server
        .repository_index(false)
        .into_iter()
        .filter(|e| e.state != Some(tritonrs::core::lifecycle::ModelState::Ready))
        .map(|e| {
            let version = e.version.map(|v| format!(" version {v}")).unwrap_or_default();
            let state = e.state.map_or("UNAVAILABLE", |s| s.as_str());
            format!("model '{}'{version} is {state}: {}", e.name, e.reason)
        })
        .collect();
    tracing::warn!(
        "Server is not ready: {loaded} model version(s) loaded, but {} (readiness needs every model READY \
         under --strict-readiness).",
        failed.join("; ")
    );
    format!("serving, not ready: {loaded} model version(s) ready, {} not", failed.len())
}

/// Tells systemd how start-up loading goes, every second until it is over: "loading K of N models",
/// and more time to start while loads run.
async fn report_loading(server: Server) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tick.tick().await;
        let index = server.repository_index(false);
        let mut models: std::collections::BTreeMap<&str, bool> = std::collections::BTreeMap::new();
        for e in &index {
            let loading = e.state == Some(tritonrs::core::lifecycle::ModelState::Loading);
            *models.entry(e.name.as_str()).or_default() |= loading;
        }
        let done = models.values().filter(|loading| !**loading).count();
        systemd::extend_timeout(Duration::from_secs(10), &format!("loading: {done} of {} models", models.len()));
    }
}

/// SIGHUP: reads the configuration file again (log settings take effect; other changed settings are
/// named, as they need a restart) and rescans the repositories in poll and explicit mode.
async fn reload_on_hangup(
    mut hangups: tokio::signal::unix::Signal,
    server: &Server,
    log: &logging::LogControl,
    mut file: Option<ConfigFile>,
) {
    while hangups.recv().await.is_some() {
        tracing::info!("Received SIGHUP: reloading.");
        systemd::reloading();
        match config::parse(std::env::args_os().collect()) {
            Ok((cli, new_file)) => {
                let a = cli.serve;
                let update = logging::LogUpdate {
                    log_info: Some(a.log_info),
                    log_warning: Some(a.log_warning),
                    log_error: Some(a.log_error),
                    log_verbose_level: Some(a.log_verbose),
                    ..Default::default()
                };
                if let Err(e) = log.update(update) {
                    tracing::warn!("Reload: {}", e.message);
                }
                let applied = ["log-info", "log-warning", "log-error", "log-verbose"];
                for key in ConfigFile::changed_keys(file.as_ref(), new_file.as_ref()) {
                    if !applied.contains(&key.as_str()) {
                        tracing::warn!(
                            "Reload: '{key}' changed in the configuration file; it takes effect at the next restart."
                        );
                    }
                }
                file = new_file;
            }
            Err(CliError::File(e)) => tracing::error!("Reload: {e}; keeping the current settings."),
            Err(CliError::Clap(e)) => {
                tracing::error!("Reload: {}; keeping the current settings.", e.to_string().trim())
            }
        }
        server.rescan().await;
        tracing::info!("Reload done.");
        systemd::ready(&log_readiness(server));
    }
}

/// Resolves on SIGINT or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
    tracing::info!("Received a shutdown signal.");
}
