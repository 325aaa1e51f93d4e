//! The `tritonrs` binary: parse flags, then serve or validate.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
use tritonrs::config::file::ConfigFile;
use tritonrs::config::{self, CliError, Command, ServeArgs, ValidateArgs};
use tritonrs::core::{repository, Server, ServerOptions};
use tritonrs::error::{Error, Result};
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
    if args.repository.model_repository.is_empty() {
        eprintln!(
            "error: no model repository: give --model-repository, TRITONRS_MODEL_REPOSITORY or model-repository in \
             the configuration file"
        );
        return ExitCode::FAILURE;
    }
    let max_tensor_bytes = args.http_max_input_size.max(args.grpc_max_message_size);
    let opts = args.model_config.backend_config().and_then(|backend_config| {
        tritonrs::assemble::repo_options(&args.model_config, &backend_config, max_tensor_bytes)
    });
    let opts = match opts {
        Ok(o) => o,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let (cloud, local): (Vec<PathBuf>, Vec<PathBuf>) =
        args.repository.model_repository.iter().cloned().partition(|r| storage::is_cloud(&r.to_string_lossy()));
    let (models, errors) = repository::scan_ns(&local, opts.namespacing);
    let mut bad = errors.len();
    // The unit's ExecStartPre runs validate: a cloud repository is checked when the server fetches it.
    for r in &cloud {
        println!("SKIP  '{}' is a cloud repository: its models are checked as the server loads them", r.display());
    }
    for e in &errors {
        println!("ERROR {}", e.message);
    }
    let mut results: std::collections::BTreeMap<String, Result<_>> = models
        .iter()
        .map(|(name, dir)| {
            let result = dir.as_ref().map_err(Clone::clone).and_then(|d| check_model(name, d, &opts));
            (name.clone(), result.map(|cfg| in_namespace(cfg, dir, &opts, &models)))
        })
        .collect();
    // Ensembles are checked against their composing models' configurations, as the server does when
    // it loads them.
    // (Not with cloud repositories, which may hold the composing models.)
    let ensemble_errors: Vec<(String, Error)> = results
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

/// With namespacing, an ensemble's steps name the models of its own repository first, as the server
/// resolves them.
fn in_namespace(
    cfg: tritonrs::proto::inference::ModelConfig,
    dir: &Result<PathBuf>,
    opts: &repository::RepoOptions,
    models: &std::collections::BTreeMap<String, Result<PathBuf>>,
) -> tritonrs::proto::inference::ModelConfig {
    match dir {
        Ok(d) if opts.namespacing && cfg.platform == "ensemble" => {
            repository::namespace::steps_in_namespace(&cfg, d, |k| models.contains_key(k))
        }
        _ => cfg,
    }
}

/// One model as `validate` checks it: its completed configuration, its files, and a version to serve.
fn check_model(
    name: &str,
    dir: &std::path::Path,
    opts: &repository::RepoOptions,
) -> Result<tritonrs::proto::inference::ModelConfig> {
    let name = repository::namespace::plain(name);
    let cfg = repository::read_model_config(dir, name, opts, None)?;
    repository::check_model_files(&cfg, dir)?;
    let versions = tritonrs::model_config::list_versions(dir);
    if repository::VersionPolicy::from_config(&cfg).select(&versions).is_empty() {
        return Err(Error::invalid(format!("model '{name}' has no version folders to serve in '{}'", dir.display())));
    }
    Ok(cfg)
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
            tracing::error!("{e}");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn serve_logged(args: ServeArgs, file: Option<ConfigFile>, log: logging::LogControl) -> Result<()> {
    if let Some(f) = &file {
        tracing::info!("Read the configuration file '{}'.", f.path.display());
    }
    // Before any model loads: each version's statistics follow the metrics settings.
    let (latency, notes) = args.metrics_config.latency();
    for n in notes {
        tracing::warn!("{n}");
    }
    tritonrs::core::stats::set_latency_metrics(latency);
    args.hosted.check()?;
    let opts = tritonrs::assemble::serve_options(&args)?;
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    // The one runtime that serves HTTP (and gRPC and metrics): --http-thread-count sizes it (by
    // default, with --io-cpu-cores, one worker per listed core).
    if let Some(n) = args.io_worker_count() {
        runtime.worker_threads(n);
    }
    // The worker threads only: the runtime's blocking threads load models, and ONNX Runtime's pool
    // threads, created there, would inherit their cores and policy. A worker parks as soon as the
    // runtime starts, so what its first park sets holds before it serves anything.
    let cores = args.io_cpu_cores.clone().map(|c| c.0);
    runtime.on_thread_park(move || set_up_worker_once(cores.as_deref()));
    // A blocking thread that a set-up worker spawns (a load that found no idle one) starts with the
    // worker's cores and policy: every runtime thread starts from the main thread's instead.
    match tritonrs::platform::affinity::ThreadDefaults::of_current_thread() {
        Ok(defaults) => {
            runtime.on_thread_start(move || {
                if let Err(e) = defaults.restore_on_current_thread() {
                    tracing::debug!("{}", e.message);
                }
            });
        }
        Err(e) => tracing::debug!("{}", e.message),
    }
    let runtime = runtime.enable_all().thread_name("tritonrs-io").build().map_err(io_error)?;
    runtime.block_on(run(args, file, opts, log))
}

/// The first time it is called on an I/O worker thread: gives it the SCHED_BATCH policy (it does not
/// preempt an instance thread that answers it; see `batch_current_thread`) and pins it to `cores`
/// (--io-cpu-cores) when given.
fn set_up_worker_once(cores: Option<&[usize]>) {
    thread_local! {
        static DONE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }
    if DONE.with(|p| p.replace(true)) {
        return;
    }
    if let Err(e) = tritonrs::platform::affinity::batch_current_thread() {
        tracing::debug!("{}", e.message);
    }
    let Some(cores) = cores else { return };
    match tritonrs::platform::affinity::pin_current_thread(cores) {
        Ok(()) => tracing::debug!("I/O worker thread pinned to cores {cores:?} (--io-cpu-cores)."),
        Err(e) => tracing::warn!("--io-cpu-cores could not pin an I/O worker thread: {}.", e.message),
    }
}

/// A front-end server running in the background; its result says how it ended.
type ServerTask = (&'static str, tokio::task::JoinHandle<Result<(), String>>);

/// Connections the kernel queues for a listener before it accepts them (capped by net.core.somaxconn).
const LISTEN_BACKLOG: u32 = 1024;

/// Binds `address:port` (port 0 picks a free one) and logs Triton's `Started <service> at ADDR:PORT`.
/// With `reuse_port` (--reuse-http-port, --reuse-grpc-port), SO_REUSEPORT lets other servers that set it
/// too listen on the same port.
async fn bind(
    address: &str,
    port: u16,
    reuse_port: bool,
    service: &str,
    flags: &str,
) -> Result<tokio::net::TcpListener> {
    let addr: SocketAddr =
        format!("{address}:{port}").parse().map_err(|e| Error::invalid(format!("invalid {flags}: {e}")))?;
    let socket = if addr.is_ipv4() { tokio::net::TcpSocket::new_v4() } else { tokio::net::TcpSocket::new_v6() };
    // A deeper backlog than the standard library's 128: at a connection cap, newcomers wait there.
    let listener = socket
        .and_then(|s| {
            s.set_reuseaddr(true)?;
            if reuse_port {
                s.set_reuseport(true)?;
            }
            s.bind(addr)?;
            s.listen(LISTEN_BACKLOG)
        })
        .map_err(|e| Error::unavailable(format!("cannot bind {service} to {addr}: {e}")))?;
    tracing::info!("Started {service} at {}", listener.local_addr().map_err(io_error)?);
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

/// An I/O failure at start-up, said as the system says it.
fn io_error(e: std::io::Error) -> Error {
    Error::unavailable(e.to_string())
}

/// The front-ends' settings, checked before the server is built: TLS files read, restrictions, MQTT
/// and Frigate.
struct Frontends {
    http_tls: Option<Arc<tokio_rustls::rustls::ServerConfig>>,
    grpc_tls: Option<tritonrs::frontend::tls::Pem>,
    http_restricted: Restrictions,
    grpc_restricted: Restrictions,
    mqtt: Option<tritonrs::frontend::mqtt::Settings>,
    frigate: Option<tritonrs::frontend::frigate::FrigateSettings>,
}

impl Frontends {
    fn from_args(args: &ServeArgs, repositories: &[PathBuf]) -> Result<Frontends> {
        let tls =
            |prefix, (use_ssl, mutual, cert, key, root)| TlsFiles::from_flags(prefix, use_ssl, mutual, cert, key, root);
        let http_tls = tls("http", args.http_tls.tls())?.map(|t| t.server_config()).transpose();
        let http_tls = http_tls?;
        // Read once, now, so a missing file stops the start instead of the gRPC server.
        let grpc_tls = tls("grpc", args.grpc_tls.tls())?.map(|t| t.pem()).transpose()?;
        Ok(Frontends {
            http_tls,
            grpc_tls,
            http_restricted: Restrictions::parse(&args.http_tls.http_restricted_api, "--http-restricted-api", false)?,
            grpc_restricted: Restrictions::parse(
                &args.grpc_tls.grpc_restricted_protocol,
                "--grpc-restricted-protocol",
                true,
            )?,
            mqtt: tritonrs::frontend::mqtt::Settings::from_args(&args.mqtt)?,
            frigate: tritonrs::frontend::frigate::FrigateSettings::from_args(&args.frigate, repositories)?,
        })
    }
}

/// The front-ends serving: their tasks, and the MQTT bridge.
struct Running {
    tasks: Vec<ServerTask>,
    bridge: Option<tritonrs::frontend::mqtt::Bridge>,
    stop: tokio::sync::watch::Sender<bool>,
}

async fn run(args: ServeArgs, file: Option<ConfigFile>, opts: ServerOptions, log: logging::LogControl) -> Result<()> {
    let frontends = Frontends::from_args(&args, &opts.repositories)?;
    let server = Server::new(opts);
    // From the start, so a SIGHUP while models load is kept for later instead of killing the server.
    let hangups = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).map_err(io_error)?;
    // The front-ends come up first so liveness answers while models load; readiness waits for start-up.
    let running = start_frontends(&args, frontends, &server, &log).await?;
    if let Some(interval) = systemd::watchdog_interval() {
        tokio::spawn(systemd::watchdog(interval, tritonrs::core::heartbeat::stalled));
    }
    let loading = systemd::enabled().then(|| tokio::spawn(report_loading(server.clone())));
    tokio::select! {
        r = server.startup() => {
            if let Some(task) = loading {
                task.abort();
            }
            r?;
            systemd::ready(&log_readiness(&server));
            if server.control_mode() == tritonrs::core::ControlMode::Poll {
                tokio::spawn(server.clone().poll_repositories());
            }
            tokio::select! {
                _ = shutdown_signal() => {}
                _ = reload_on_hangup(hangups, &server, &log, file) => {}
            }
        }
        _ = shutdown_signal() => {}
    }
    shut_down(&server, running, args.exit_timeout_secs).await;
    Ok(())
}

/// Starts each configured front-end with the server handle.
async fn start_frontends(
    args: &ServeArgs,
    fe: Frontends,
    server: &Server,
    log: &logging::LogControl,
) -> Result<Running> {
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let mut tasks: Vec<ServerTask> = Vec::new();
    let [http_limits, grpc_limits, metrics_limits] = connection_limits(args);
    if args.allow_http {
        let listener =
            bind(&args.http_address, args.http_port, args.reuse_http_port, "HTTPService", "--http-address/--http-port")
                .await?;
        let listener = GuardedListener::new(listener, http_limits);
        let state = http::HttpState {
            server: server.clone(),
            log: log.clone(),
            max_body: args.http_max_input_size,
            restricted: fe.http_restricted,
            deepstack_detection_model: args.deepstack_detection_model.clone(),
            header_forward: args.compat.http_header_forward_pattern.clone(),
        };
        let header_timeout = listener.limits().header_timeout;
        let task = match fe.http_tls {
            Some(config) => {
                serve_axum(TlsListener::new(listener, config), header_timeout, http::router(state), stop_rx.clone())
            }
            None => serve_axum(listener, header_timeout, http::router(state), stop_rx.clone()),
        };
        tasks.push(("HTTP", task));
    }
    if args.allow_grpc {
        let listener = bind(
            &args.grpc_address,
            args.grpc_port,
            args.reuse_grpc_port,
            "GRPCInferenceService",
            "--grpc-address/--grpc-port",
        )
        .await?;
        let listener = GuardedListener::new(listener, grpc_limits);
        let state = grpc::GrpcState {
            server: server.clone(),
            log: log.clone(),
            max_message_size: args.grpc_max_message_size,
            restricted: fe.grpc_restricted,
            header_forward: args.compat.grpc_header_forward_pattern.clone(),
        };
        let http2 = grpc::Http2Options {
            keepalive_interval: limit(Duration::from_millis(args.grpc_keepalive_time)),
            keepalive_timeout: Duration::from_millis(args.grpc_keepalive_timeout),
            max_connection_age: args.grpc_max_connection_age.map(Duration::from_millis),
            compress_responses: args.grpc_infer_response_compression_level != config::CompressionLevel::None,
        };
        let serving = grpc::serve(listener, state, http2, fe.grpc_tls, stopping(stop_rx.clone()));
        tasks.push(("gRPC", tokio::spawn(async move { serving.await.map_err(|e| e.to_string()) })));
    }
    let mqtt_metrics = fe.mqtt.as_ref().map(|_| Arc::new(tritonrs::frontend::mqtt::metrics::MqttMetrics::default()));
    let frigate_metrics =
        fe.frigate.as_ref().map(|_| Arc::new(tritonrs::frontend::frigate::metrics::FrigateMetrics::default()));
    if args.allow_metrics {
        let (mqtt, frigate) = (mqtt_metrics.clone(), frigate_metrics.clone());
        tasks.push(("metrics", start_metrics(args, server, metrics_limits, mqtt, frigate, stop_rx.clone()).await?));
    }
    if let (Some(settings), Some(m)) = (fe.frigate, frigate_metrics) {
        use tritonrs::frontend::frigate;
        let socket = frigate::bind(&settings, server, &m).await?;
        let serving = frigate::serve(socket, settings, server.clone(), m, stop_rx.clone());
        tasks.push(("Frigate ZMQ", tokio::spawn(async move { serving.await.map_err(|e| e.to_string()) })));
    }
    // The bridge subscribes to each model's requests as it becomes READY.
    let bridge = match (fe.mqtt, mqtt_metrics) {
        (Some(settings), Some(m)) => Some(tritonrs::frontend::mqtt::Bridge::start(settings, server.clone(), m)),
        _ => None,
    };
    Ok(Running { tasks, bridge, stop })
}

/// The metrics front-end, with the CPU and GPU monitors it reports.
async fn start_metrics(
    args: &ServeArgs,
    server: &Server,
    limits: ConnLimits,
    mqtt: Option<Arc<tritonrs::frontend::mqtt::metrics::MqttMetrics>>,
    frigate: Option<Arc<tritonrs::frontend::frigate::metrics::FrigateMetrics>>,
    stop_rx: tokio::sync::watch::Receiver<bool>,
) -> Result<tokio::task::JoinHandle<std::result::Result<(), String>>> {
    let listener =
        bind(&args.metrics_address, args.metrics_port, false, "Metrics Service", "--metrics-address/--metrics-port")
            .await?;
    let listener = GuardedListener::new(listener, limits);
    let interval = Duration::from_millis(args.metrics_interval_ms);
    let cpu = if args.allow_cpu_metrics {
        Some(tritonrs::platform::CpuMonitor::start(interval).map_err(io_error)?)
    } else {
        None
    };
    let gpu = if args.allow_gpu_metrics {
        tritonrs::platform::gpu::GpuMonitor::start(interval).map_err(io_error)?
    } else {
        None
    };
    let app = metrics::router(metrics::MetricsState { server: server.clone(), cpu, gpu, mqtt, frigate });
    let header_timeout = listener.limits().header_timeout;
    Ok(serve_axum(listener, header_timeout, app, stop_rx))
}

/// Stops accepting, lets in-flight requests finish and unloads every model; a second signal exits at
/// once.
async fn shut_down(server: &Server, running: Running, exit_timeout_secs: u64) {
    systemd::stopping();
    let timeout = Duration::from_secs(exit_timeout_secs);
    if let Some(b) = running.bridge {
        // Its requests in progress finish while the core still accepts them; then `offline`.
        b.stop(timeout.min(Duration::from_secs(10))).await;
    }
    server.stop_accepting();
    let _ = running.stop.send(true);
    let drain = async {
        for (name, task) in running.tasks {
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
                tracing::warn!("In-flight work did not finish within --exit-timeout-secs={exit_timeout_secs}; exiting anyway.");
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
