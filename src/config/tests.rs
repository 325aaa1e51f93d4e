//! Unit tests of `config/mod.rs`.

use super::*;

#[test]
fn triton_style_flags_parse() {
    let cli = Cli::try_parse_from([
        "tritonrs",
        "--model-store=/m",
        "--model-repository",
        "/n",
        "--model-control-mode=explicit",
        "--load-model=a",
        "--load-model",
        "b",
        "--strict-readiness=false",
        "--exit-on-error",
        "--http-port=0",
        "--grpc-port=0",
        "--grpc-max-message-size=1024",
        "--grpc-infer-allocation-pool-size=16",
        "--backend-config=onnxruntime,library=/x.so",
        "--log-verbose=1",
    ])
    .unwrap();
    let s = cli.serve;
    assert_eq!(s.repository.model_repository, vec![PathBuf::from("/m"), PathBuf::from("/n")]);
    assert_eq!(s.model_control_mode, ControlMode::Explicit);
    assert_eq!(s.load_model, vec!["a", "b"]);
    assert!(!s.strict_readiness);
    assert!(s.exit_on_error);
    assert_eq!(s.http_port, 0);
    assert_eq!(s.grpc_port, 0);
    assert_eq!(s.grpc_max_message_size, 1024);
    assert_eq!(s.model_config.backend_config, vec!["onnxruntime,library=/x.so"]);
}

#[test]
fn tritonserver_grpc_connection_flags_parse_and_defaults_match() {
    let d = Cli::try_parse_from(["tritonrs", "--model-repository=/m"]).unwrap().serve;
    assert_eq!((d.grpc_keepalive_time, d.grpc_keepalive_timeout), (7_200_000, 20_000));
    assert!(!d.grpc_keepalive_permit_without_calls);
    assert_eq!((d.grpc_http2_max_pings_without_data, d.grpc_http2_min_recv_ping_interval_without_data), (2, 300_000));
    assert_eq!((d.grpc_max_connection_age, d.grpc_max_connection_age_grace), (None, None));
    assert_eq!((d.http_header_timeout_secs, d.http_idle_timeout_secs, d.http_max_connections), (30, 300, 0));
    let s = Cli::try_parse_from([
        "tritonrs",
        "--model-repository=/m",
        "--grpc-keepalive-time=1000",
        "--grpc-keepalive-timeout=500",
        "--grpc-keepalive-permit-without-calls=1",
        "--grpc-http2-max-pings-without-data=0",
        "--grpc-http2-min-recv-ping-interval-without-data=10",
        "--grpc-http2-max-ping-strikes=0",
        "--grpc-max-connection-age=60000",
        "--grpc-max-connection-age-grace=5000",
        "--grpc-max-connections=10",
        "--grpc-header-timeout-secs=5",
        "--http-max-connections=20",
        "--http-header-timeout-secs=0",
        "--http-idle-timeout-secs=9",
    ])
    .unwrap()
    .serve;
    assert_eq!((s.grpc_keepalive_time, s.grpc_keepalive_timeout), (1000, 500));
    assert!(s.grpc_keepalive_permit_without_calls);
    assert_eq!((s.grpc_max_connection_age, s.grpc_max_connection_age_grace), (Some(60_000), Some(5000)));
    assert_eq!((s.grpc_max_connections, s.grpc_header_timeout_secs), (10, 5));
    assert_eq!((s.http_max_connections, s.http_header_timeout_secs, s.http_idle_timeout_secs), (20, 0, 9));
}

#[test]
fn validate_subcommand_parses() {
    let cli = Cli::try_parse_from(["tritonrs", "validate", "--model-repository", "/m"]).unwrap();
    assert!(
        matches!(cli.command, Some(Command::Validate(ref v)) if v.repository.model_repository == vec![PathBuf::from("/m")])
    );
}

#[test]
fn the_last_of_a_repeated_flag_wins() {
    let cli = Cli::try_parse_from([
        "tritonrs",
        "--allow-metrics=false",
        "--allow-metrics=true",
        "--http-port=1",
        "--http-port=2",
    ])
    .unwrap();
    assert!(cli.serve.allow_metrics);
    assert_eq!(cli.serve.http_port, 2);
}

#[test]
fn bad_bool_is_rejected() {
    assert!(Cli::try_parse_from(["tritonrs", "--strict-readiness=maybe"]).is_err());
}

/// The `--help` groups; every server flag is under one of them, so a Triton user finds theirs.
const HELP_HEADINGS: &[&str] = &[
    "Server",
    "Logging",
    "Repository",
    "HTTP",
    "gRPC",
    "SageMaker and Vertex AI",
    "Metrics",
    "Trace",
    "Backends and agents",
    "Cache",
    "Rate limiter",
    "Memory and devices",
    "Jetson and edge",
    "MQTT",
    "Frigate",
];

#[test]
fn every_server_flag_has_a_help_heading() {
    let cmd = Cli::command();
    for arg in cmd.get_arguments().filter(|a| !matches!(a.get_id().as_str(), "help" | "version")) {
        let heading = arg.get_help_heading();
        assert!(
            heading.is_some_and(|h| HELP_HEADINGS.contains(&h)),
            "--{} has the help heading {heading:?}, not one of {HELP_HEADINGS:?}",
            arg.get_id()
        );
    }
}

#[test]
fn sagemaker_and_vertex_flags_parse_and_refuse_when_on() {
    let off = Cli::try_parse_from([
        "tritonrs",
        "--allow-sagemaker=false",
        "--sagemaker-port=8080",
        "--sagemaker-safe-port-range=8000-8002",
        "--sagemaker-thread-count=8",
        "--allow-vertex-ai=false",
        "--vertex-ai-port=8080",
        "--vertex-ai-thread-count=8",
        "--vertex-ai-default-model=m",
    ])
    .unwrap();
    assert!(off.serve.hosted.check().is_ok());
    let on = Cli::try_parse_from(["tritonrs", "--allow-sagemaker=true"]).unwrap();
    assert!(on.serve.hosted.check().unwrap_err().message.contains("--allow-sagemaker"));
    let on = Cli::try_parse_from(["tritonrs", "--allow-vertex-ai"]).unwrap();
    assert!(on.serve.hosted.check().unwrap_err().message.contains("--allow-vertex-ai"));
    assert!(Cli::try_parse_from(["tritonrs", "--sagemaker-safe-port-range=9"]).is_err());
}

#[test]
fn memory_flags_check_their_syntax() {
    let s = Cli::try_parse_from(["tritonrs", "--cuda-virtual-address-size=0:1073741824", "--enable-peer-access=false"])
        .unwrap()
        .serve;
    assert_eq!(s.memory.cuda_virtual_address_size, vec![(0, 1 << 30)]);
    assert!(!s.memory.enable_peer_access);
    assert!(Cli::try_parse_from(["tritonrs", "--cuda-virtual-address-size=1024"]).is_err());
    assert!(Cli::try_parse_from(["tritonrs", "--grpc-infer-response-compression-level=max"]).is_err());
    assert!(Cli::try_parse_from(["tritonrs", "--http-thread-count=0"]).is_err());
}

#[test]
fn backend_config_from_the_configuration_file_is_marked_so() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tritonrs.toml");
    std::fs::write(&file, "backend-config = [\"onnxruntime,library=/file.so\"]\n").unwrap();
    let parse_with = |extra: &[&str]| {
        let mut args: Vec<OsString> = extra.iter().map(OsString::from).collect();
        args.insert(0, "tritonrs".into());
        args.extend(["--config", file.to_str().unwrap()].map(OsString::from));
        parse(args).unwrap_or_else(|e| panic!("{e:?}")).0
    };
    let cli = parse_with(&["--model-repository=/m"]);
    let c = cli.serve.model_config.backend_config().unwrap();
    assert_eq!((c.get("onnxruntime", "library"), c.from_config_file), (Some("/file.so"), true));
    // The command line's replaces the file's, and is not the file's.
    let cli = parse_with(&["--model-repository=/m", "--backend-config=onnxruntime,library=/flag.so"]);
    let c = cli.serve.model_config.backend_config().unwrap();
    assert_eq!((c.get("onnxruntime", "library"), c.from_config_file), (Some("/flag.so"), false));
    // validate and tune read the file the same way.
    let Some(Command::Validate(v)) = parse_with(&["validate", "--model-repository=/m"]).command else { panic!() };
    assert!(v.model_config.backend_config().unwrap().from_config_file);
}

#[test]
fn io_workers_default_to_one_per_listed_core() {
    let args = |extra: &[&str]| {
        let mut v = vec!["tritonrs", "--model-repository=/m"];
        v.extend_from_slice(extra);
        Cli::try_parse_from(v).unwrap().serve
    };
    assert_eq!(args(&[]).io_worker_count(), None, "tokio's default: one per CPU core");
    assert_eq!(args(&["--io-cpu-cores=0"]).io_worker_count(), Some(1));
    assert_eq!(args(&["--io-cpu-cores=0,2-3"]).io_worker_count(), Some(3));
    assert_eq!(args(&["--io-cpu-cores=1,1,0-1"]).io_worker_count(), Some(2), "a core listed twice counts once");
    assert_eq!(args(&["--io-cpu-cores=0", "--http-thread-count=4"]).io_worker_count(), Some(4));
    assert_eq!(args(&["--http-thread-count=3"]).io_worker_count(), Some(3));
}
