//! The `tritonrs` binary: parse flags, then serve or validate.

use clap::Parser;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;
use tritonrs::backend::BackendConfig;
use tritonrs::config::{Cli, Command, ServeArgs, ValidateArgs};
use tritonrs::core::{repository, Server, ServerOptions};
use tritonrs::frontend::{grpc, http, metrics};
use tritonrs::logging::{self, LogSettings};

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Validate(args)) => validate(args),
        None => match serve(cli.serve) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                tracing::error!("{e:#}");
                eprintln!("error: {e:#}");
                ExitCode::FAILURE
            }
        },
    }
}

/// `tritonrs validate`: one line per model, exit 1 if any is invalid.
fn validate(args: ValidateArgs) -> ExitCode {
    let backend_config = match BackendConfig::parse(&args.model_config.backend_config) {
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
    let (models, errors) = repository::scan(&args.model_repository);
    let mut bad = errors.len();
    for e in &errors {
        println!("ERROR {}", e.message);
    }
    let mut results: std::collections::BTreeMap<String, tritonrs::error::Result<_>> = models
        .iter()
        .map(|(name, dir)| {
            let result = dir.as_ref().map_err(Clone::clone).and_then(|d| {
                let cfg = repository::read_model_config(d, name, &opts, None)?;
                repository::check_model_files(&cfg, d)?;
                let versions = repository::list_versions(d);
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
    let ensemble_errors: Vec<(String, tritonrs::error::Error)> = results
        .iter()
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
                    for line in repository::pbtxt::config_to_pbtxt(&cfg).lines() {
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

fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let log = logging::init(LogSettings {
        log_file: args.log_file.as_ref().map(|p| p.display().to_string()).unwrap_or_default(),
        log_info: args.log_info,
        log_warning: args.log_warning,
        log_error: args.log_error,
        log_verbose_level: args.log_verbose,
        log_format: args.log_format.clone(),
    })?;
    if args.model_repository.is_empty() {
        anyhow::bail!("at least one --model-repository is required");
    }
    let backend_config = BackendConfig::parse(&args.model_config.backend_config)?;
    let repo =
        args.model_config.repo_options(&backend_config, args.http_max_input_size.max(args.grpc_max_message_size))?;
    let (trace, trace_warnings) = args.trace_settings()?;
    for w in trace_warnings {
        tracing::warn!("{w}");
    }
    let opts = ServerOptions {
        id: args.id.clone(),
        repositories: args.model_repository.clone(),
        control_mode: args.model_control_mode,
        load_models: args.load_model.clone(),
        poll_interval: Duration::from_secs(args.repository_poll_secs.max(1)),
        strict_readiness: args.strict_readiness,
        exit_on_error: args.exit_on_error,
        repo,
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
    };
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().thread_name("tritonrs-io").build()?;
    runtime.block_on(run(args, opts, log))
}

/// A front-end server running in the background; its result says how it ended.
type ServerTask = (&'static str, tokio::task::JoinHandle<Result<(), String>>);

/// Binds `address:port` (port 0 picks a free one) and logs Triton's `Started <service> at ADDR:PORT`.
async fn bind(address: &str, port: u16, service: &str, flags: &str) -> anyhow::Result<tokio::net::TcpListener> {
    let addr: SocketAddr = format!("{address}:{port}").parse().map_err(|e| anyhow::anyhow!("invalid {flags}: {e}"))?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot bind {service} to {addr}: {e}"))?;
    tracing::info!("Started {service} at {}", listener.local_addr()?);
    Ok(listener)
}

/// Resolves when shutdown begins.
async fn stopping(mut rx: tokio::sync::watch::Receiver<bool>) {
    let _ = rx.wait_for(|s| *s).await;
}

/// Serves an axum app until shutdown begins, then lets open requests finish.
fn serve_axum(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    stop: tokio::sync::watch::Receiver<bool>,
) -> tokio::task::JoinHandle<Result<(), String>> {
    tokio::spawn(async move {
        axum::serve(listener, app).with_graceful_shutdown(stopping(stop)).await.map_err(|e| e.to_string())
    })
}

async fn run(args: ServeArgs, opts: ServerOptions, log: logging::LogControl) -> anyhow::Result<()> {
    let server = Server::new(opts);
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    // The front-ends come up first so liveness answers while models load; readiness waits for start-up.
    let mut tasks: Vec<ServerTask> = Vec::new();
    if args.allow_http {
        let listener = bind(&args.http_address, args.http_port, "HTTPService", "--http-address/--http-port").await?;
        let state = http::HttpState { server: server.clone(), log: log.clone(), max_body: args.http_max_input_size };
        tasks.push(("HTTP", serve_axum(listener, http::router(state), stop_rx.clone())));
    }
    if args.allow_grpc {
        let listener =
            bind(&args.grpc_address, args.grpc_port, "GRPCInferenceService", "--grpc-address/--grpc-port").await?;
        let state = grpc::GrpcState { server: server.clone(), log, max_message_size: args.grpc_max_message_size };
        let serving = grpc::serve(listener, state, stopping(stop_rx.clone()));
        tasks.push(("gRPC", tokio::spawn(async move { serving.await.map_err(|e| e.to_string()) })));
    }
    if args.allow_metrics {
        let listener =
            bind(&args.metrics_address, args.metrics_port, "Metrics Service", "--metrics-address/--metrics-port")
                .await?;
        let cpu = if args.allow_cpu_metrics {
            Some(tritonrs::platform::CpuMonitor::start(Duration::from_millis(args.metrics_interval_ms))?)
        } else {
            None
        };
        let app = metrics::router(metrics::MetricsState { server: server.clone(), cpu });
        tasks.push(("metrics", serve_axum(listener, app, stop_rx.clone())));
    }
    tokio::select! {
        r = server.startup() => {
            r.map_err(|e| anyhow::anyhow!("{}", e.message))?;
            tracing::info!("Server is ready: {} model version(s) loaded.", server.repository_index(true).len());
            if args.model_control_mode == tritonrs::core::ControlMode::Poll {
                tokio::spawn(server.clone().poll_repositories());
            }
            shutdown_signal().await;
        }
        _ = shutdown_signal() => {}
    }
    // Stop accepting, let in-flight requests finish, unload every model; a second signal exits at once.
    server.stop_accepting();
    let _ = stop_tx.send(true);
    let timeout = Duration::from_secs(args.exit_timeout_secs);
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
    tokio::select! {
        r = tokio::time::timeout(timeout, drain) => {
            if r.is_err() {
                tracing::warn!("In-flight work did not finish within --exit-timeout-secs={}; exiting anyway.", args.exit_timeout_secs);
            }
        }
        _ = shutdown_signal() => tracing::warn!("Second shutdown signal received; exiting now."),
    }
    // Buffered traces are written and the trace file's JSON array is closed, whichever way we stop.
    server.tracer().shutdown();
    tracing::info!("Server stopped.");
    Ok(())
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
