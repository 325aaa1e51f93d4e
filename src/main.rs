//! The `tritonrs` binary: parse flags, then serve or validate.

use clap::Parser;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;
use tritonrs::backend::BackendConfig;
use tritonrs::config::{Cli, Command, ServeArgs, ValidateArgs};
use tritonrs::core::{repository, Server, ServerOptions};
use tritonrs::frontend::{grpc, http};
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
    let opts = match args.model_config.repo_options(&backend_config) {
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
    for (name, dir) in &models {
        let result = dir.as_ref().map_err(Clone::clone).and_then(|d| {
            let cfg = repository::read_model_config(d, name, &opts, None)?;
            let versions = repository::list_versions(d);
            if repository::VersionPolicy::from_config(&cfg).select(&versions).is_empty() {
                return Err(tritonrs::error::Error::invalid(format!(
                    "model '{name}' has no version folders to serve in '{}'",
                    d.display()
                )));
            }
            Ok(cfg)
        });
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
    let repo = args.model_config.repo_options(&backend_config)?;
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
    };
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().thread_name("tritonrs-io").build()?;
    runtime.block_on(run(args, opts, log))
}

async fn run(args: ServeArgs, opts: ServerOptions, log: logging::LogControl) -> anyhow::Result<()> {
    let server = Server::new(opts);
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    // HTTP comes up first so liveness answers while models load; readiness waits for start-up.
    let mut http_task = None;
    if args.allow_http {
        let addr: SocketAddr = format!("{}:{}", args.http_address, args.http_port)
            .parse()
            .map_err(|e| anyhow::anyhow!("invalid --http-address/--http-port: {e}"))?;
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| anyhow::anyhow!("cannot bind the HTTP server to {addr}: {e}"))?;
        let bound = listener.local_addr()?;
        tracing::info!("Started HTTPService at {bound}");
        let app = http::router(http::HttpState {
            server: server.clone(),
            log: log.clone(),
            max_body: args.http_max_input_size,
        });
        let mut stop = stop_rx.clone();
        http_task = Some(tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    let _ = stop.wait_for(|s| *s).await;
                })
                .await
        }));
    }
    let mut grpc_task = None;
    if args.allow_grpc {
        let addr: SocketAddr = format!("{}:{}", args.grpc_address, args.grpc_port)
            .parse()
            .map_err(|e| anyhow::anyhow!("invalid --grpc-address/--grpc-port: {e}"))?;
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| anyhow::anyhow!("cannot bind the gRPC server to {addr}: {e}"))?;
        let bound = listener.local_addr()?;
        tracing::info!("Started GRPCInferenceService at {bound}");
        let state = grpc::GrpcState { server: server.clone(), log, max_message_size: args.grpc_max_message_size };
        let mut stop = stop_rx.clone();
        grpc_task = Some(tokio::spawn(grpc::serve(listener, state, async move {
            let _ = stop.wait_for(|s| *s).await;
        })));
    }
    let mut metrics_task = None;
    if args.allow_metrics {
        let addr: SocketAddr = format!("{}:{}", args.metrics_address, args.metrics_port)
            .parse()
            .map_err(|e| anyhow::anyhow!("invalid --metrics-address/--metrics-port: {e}"))?;
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| anyhow::anyhow!("cannot bind the metrics server to {addr}: {e}"))?;
        tracing::info!("Started Metrics Service at {}", listener.local_addr()?);
        let cpu = if args.allow_cpu_metrics {
            Some(tritonrs::platform::CpuMonitor::start(Duration::from_millis(args.metrics_interval_ms))?)
        } else {
            None
        };
        let app = tritonrs::frontend::metrics::router(tritonrs::frontend::metrics::MetricsState {
            server: server.clone(),
            cpu,
        });
        let mut stop = stop_rx.clone();
        metrics_task = Some(tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    let _ = stop.wait_for(|s| *s).await;
                })
                .await
        }));
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
        if let Some(task) = http_task {
            match task.await {
                Ok(Err(e)) => tracing::error!("The HTTP server failed while shutting down: {e}"),
                Err(e) => tracing::error!("The HTTP server task failed: {e}"),
                Ok(Ok(())) => {}
            }
        }
        if let Some(task) = grpc_task {
            match task.await {
                Ok(Err(e)) => tracing::error!("The gRPC server failed while shutting down: {e}"),
                Err(e) => tracing::error!("The gRPC server task failed: {e}"),
                Ok(Ok(())) => {}
            }
        }
        if let Some(task) = metrics_task {
            let _ = task.await;
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
