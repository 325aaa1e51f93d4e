//! Command-line flags with tritonserver's names. Every flag also reads an environment variable
//! (`TRITONRS_<FLAG>`) and a key of the configuration file (see [`file`]); the command line wins over
//! the environment, which wins over the file.

pub mod compat;
pub mod file;
pub mod frigate;
pub mod help;
pub mod hosted;
pub mod loading;
pub mod memory;
pub mod metrics;
pub mod mqtt;
pub mod tune;

use clap::{ArgAction, Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use std::ffi::OsString;
use std::path::PathBuf;

/// Why the settings could not be read.
#[derive(Debug)]
pub enum CliError {
    /// A command-line mistake (or --help / --version): clap prints and exits.
    Clap(clap::Error),
    /// The configuration file: the message names the file and line.
    File(String),
}

impl From<clap::Error> for CliError {
    fn from(e: clap::Error) -> Self {
        CliError::Clap(e)
    }
}

/// Reads the settings as the server and `validate` both do: the configuration file, then the
/// `TRITONRS_*` environment, then `args` (the program name first). Also returns the file, if one
/// was read.
pub fn parse(args: Vec<OsString>) -> Result<(Cli, Option<file::ConfigFile>), CliError> {
    let config = match file::locate(&args, std::env::var_os("TRITONRS_CONFIG")) {
        Some((path, explicit)) => match file::ConfigFile::read(&path) {
            Ok(f) => Some(f),
            Err(_) if !explicit && !path.exists() => None,
            Err(e) => return Err(CliError::File(e)),
        },
        None => None,
    };
    let mut cmd = help::layout(Cli::command());
    if let Some(f) = &config {
        // The file's keys are the server's flags and those of `validate` and `tune`; each command takes
        // the keys it knows as defaults and leaves the others' to them.
        let top = cmd.clone();
        let sub =
            |name: &str| cmd.find_subcommand(name).cloned().ok_or_else(|| CliError::File(format!("no {name} command")));
        let (validate, tune) = (sub("validate")?, sub("tune")?);
        let validate_done = f.apply(validate.clone(), &[&top, &tune]).map_err(CliError::File)?;
        let tune_done = f.apply(tune.clone(), &[&top, &validate]).map_err(CliError::File)?;
        cmd = f
            .apply(cmd, &[&validate, &tune])
            .map_err(CliError::File)?
            .mut_subcommand("validate", |_| validate_done)
            .mut_subcommand("tune", |_| tune_done);
    }
    let matches = match cmd.try_get_matches_from_mut(args.clone()) {
        Ok(m) => m,
        Err(e) => return Err(help::unknown_flag(&e, &mut cmd, &args).unwrap_or(e).into()),
    };
    let mut cli = Cli::from_arg_matches(&matches)?;
    // The configuration file's values are the flags' defaults: a default `--backend-config` came from it.
    let from_file =
        |m: &clap::ArgMatches| m.value_source("backend_config") == Some(clap::parser::ValueSource::DefaultValue);
    match (&mut cli.command, matches.subcommand()) {
        (None, _) => cli.serve.model_config.backend_config_from_file = from_file(&matches),
        (Some(Command::Validate(a)), Some((_, m))) => a.model_config.backend_config_from_file = from_file(m),
        (Some(Command::Tune(a)), Some((_, m))) => a.model_config.backend_config_from_file = from_file(m),
        _ => {}
    }
    Ok((cli, config))
}

/// Triton's `--model-control-mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ControlMode {
    /// Load every model at start; no changes afterwards.
    None,
    /// Load `--load-model` at start; load and unload through the API.
    Explicit,
    /// Load everything at start and follow the repository's changes.
    Poll,
}

/// tritonserver's `--grpc-infer-response-compression-level`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CompressionLevel {
    None,
    Low,
    Medium,
    High,
}

/// A count of milliseconds as tritonserver's `<float>` flags take it (`2000`, `2000.0`, `1e3`), to the
/// nearest millisecond.
fn parse_millis(s: &str) -> Result<u64, String> {
    match s.trim().parse::<f64>() {
        Ok(ms) if ms.is_finite() && ms >= 0.0 && ms <= u64::MAX as f64 => Ok(ms.round() as u64),
        _ => Err(format!("'{s}' is not a number of milliseconds")),
    }
}

/// Parses Triton's boolean flag values: true/false, 1/0, yes/no, on/off.
fn parse_bool(s: &str) -> Result<bool, String> {
    match s.to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Ok(true),
        "false" | "0" | "no" | "off" => Ok(false),
        _ => Err(format!("'{s}' is not a boolean (use true or false)")),
    }
}

/// A Triton-compatible inference server for edge devices.
#[derive(Debug, Parser)]
// A flag given twice takes its last value, as tritonserver's getopt parsing does.
#[command(name = "tritonrs", version, about, args_conflicts_with_subcommands = true, args_override_self = true)]
pub struct Cli {
    /// Configuration file: every flag under its own name (`http-port = 8000`). Default
    /// /etc/tritonrs/tritonrs.toml when it exists; flags and TRITONRS_* variables override it.
    #[arg(help_heading = "Server", long, global = true, env = "TRITONRS_CONFIG", value_name = "PATH")]
    pub config: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub serve: ServeArgs,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Check every model's configuration without serving or loading it; exits 1 if any is invalid.
    Validate(ValidateArgs),
    /// Write an encrypted copy of a model folder for the `decrypt` repository agent: every file but the
    /// top-level config.pbtxt is sealed with AES-256-GCM (the format is in the README).
    EncryptModel(EncryptModelArgs),
    /// Find the best configuration of a model (Model Analyzer built in): sweep instance counts,
    /// batching and threads in-process, measure each variant, and report and export the best.
    Tune(Box<tune::TuneArgs>),
}

#[derive(Debug, Args)]
pub struct EncryptModelArgs {
    /// The model folder (the one holding config.pbtxt and the version folders).
    pub dir: PathBuf,
    /// The key: 32 bytes or 64 hex digits, readable only by its owner (e.g. `head -c 32 /dev/urandom`).
    #[arg(long, value_name = "PATH")]
    pub key_file: PathBuf,
    /// Where the encrypted copy goes; must not exist. Default: `<dir>.encrypted` beside the folder.
    #[arg(long, value_name = "DIR")]
    pub output: Option<PathBuf>,
}

#[derive(Debug, Args)]
#[command(mut_arg("model_repository", |a| a.help("Model repository to check (repeatable); the server's setting when not given")))]
pub struct ValidateArgs {
    #[command(flatten)]
    pub repository: RepositoryArgs,
    /// Also print each valid model's completed configuration (after auto-complete), in config.pbtxt form.
    #[arg(long)]
    pub print_config: bool,
    /// As for the server: warmup samples and states may be no larger than the largest request accepted.
    #[arg(help_heading = "HTTP", long, env = "TRITONRS_HTTP_MAX_INPUT_SIZE", default_value_t = 64 * 1024 * 1024)]
    pub http_max_input_size: usize,
    /// As for the server: warmup samples and states may be no larger than the largest request accepted.
    #[arg(help_heading = "gRPC", long, env = "TRITONRS_GRPC_MAX_MESSAGE_SIZE", default_value_t = 64 * 1024 * 1024)]
    pub grpc_max_message_size: usize,
    #[command(flatten)]
    pub model_config: ModelConfigArgs,
}

/// `--model-repository` (and tritonserver's `--model-store`), declared once for the server, `validate`
/// and `tune`; each command may give it a help text of its own.
#[derive(Debug, Clone, Args)]
pub struct RepositoryArgs {
    /// Path to a model repository (repeatable).
    #[arg(
        help_heading = "Repository",
        long = "model-repository",
        visible_alias = "model-store",
        env = "TRITONRS_MODEL_REPOSITORY",
        value_delimiter = ','
    )]
    pub model_repository: Vec<PathBuf>,
}

/// Flags that decide how model configurations are completed.
#[derive(Debug, Clone, Args)]
pub struct ModelConfigArgs {
    /// Do not auto-complete model configurations from the model files; config.pbtxt must be complete.
    #[arg(help_heading = "Repository", long, env = "TRITONRS_DISABLE_AUTO_COMPLETE_CONFIG")]
    pub disable_auto_complete_config: bool,
    /// Same as --disable-auto-complete-config when true (Triton's older flag).
    #[arg(help_heading = "Repository", long, env = "TRITONRS_STRICT_MODEL_CONFIG", value_parser = parse_bool, num_args = 0..=1,
          default_missing_value = "true", default_value = "false", action = ArgAction::Set)]
    pub strict_model_config: bool,
    /// Serve same-named models of different repositories side by side, as tritonserver does: requests
    /// cannot name such a model, an ensemble uses the one of its own repository, and loading or
    /// unloading the name acts on every repository's copy. Off, a name in two repositories makes that
    /// model UNAVAILABLE.
    #[arg(long, env = "TRITONRS_MODEL_NAMESPACING", value_name = "BOOL", help_heading = "Repository",
          value_parser = parse_bool, num_args = 0..=1, default_missing_value = "true",
          default_value = "false", action = ArgAction::Set)]
    pub model_namespacing: bool,
    /// Settings for a backend, as `<backend>,<setting>=<value>`, or `<setting>=<value>` for all backends
    /// (repeatable). E.g. `onnxruntime,library=/usr/lib/libonnxruntime.so`, `default-max-batch-size=8`.
    #[arg(help_heading = "Backends and agents", long, env = "TRITONRS_BACKEND_CONFIG", value_delimiter = ';')]
    pub backend_config: Vec<String>,
    /// Whether `backend_config` came from the configuration file (set by [`parse`]).
    #[arg(skip)]
    pub backend_config_from_file: bool,
    /// Where Triton backend libraries are installed: a model whose backend is not built in is served by
    /// `<dir>/<backend>/libtriton_<backend>.so` (or that file in the model's version folder or folder).
    #[arg(help_heading = "Backends and agents", long, env = "TRITONRS_BACKEND_DIRECTORY", default_value = crate::model_api::DEFAULT_BACKEND_DIRECTORY)]
    pub backend_directory: std::path::PathBuf,
    /// Where Triton repository agent libraries are installed: an agent a model names in
    /// `model_repository_agents` is `<dir>/<agent>/libtritonrepoagent_<agent>.so`.
    #[arg(help_heading = "Backends and agents", long, env = "TRITONRS_REPOAGENT_DIRECTORY", default_value = crate::model_api::DEFAULT_REPOAGENT_DIRECTORY)]
    pub repoagent_directory: std::path::PathBuf,
    /// Settings for a built-in repository agent, as `<agent>,<setting>=<value>` (repeatable):
    /// `decrypt,key-file=PATH` (32 bytes or 64 hex digits, readable only by the server's user) and
    /// `decrypt,work-dir=PATH` (where decrypted models are kept while loaded, in a folder of the agent's own).
    #[arg(help_heading = "Backends and agents", long, env = "TRITONRS_REPOAGENT_CONFIG", value_delimiter = ';')]
    pub repoagent_config: Vec<String>,
    #[command(flatten)]
    pub config_name: compat::ConfigNameArgs,
}

/// The TLS and restriction flags of one front-end, declared once for HTTP and gRPC: `--<p>-use-ssl`,
/// `--<p>-use-ssl-mutual`, `--<p>-server-cert`, `--<p>-server-key`, `--<p>-root-cert` and the
/// restriction flag, each with its `TRITONRS_<P>_*` variable and the help text given.
macro_rules! tls_args {
    ($name:ident, $p:tt, $P:tt, $heading:tt, [$ssl:tt, $mutual:tt, $cert:tt, $key:tt, $root:tt],
     $restrict:ident, $restrict_long:tt, $restrict_env:tt, $restrict_help:tt) => {
        #[derive(Debug, Clone, Args)]
        pub struct $name {
            #[arg(help_heading = $heading, id = concat!($p, "_use_ssl"), long = concat!($p, "-use-ssl"), value_name = concat!($P, "_USE_SSL"),
                  env = concat!("TRITONRS_", $P, "_USE_SSL"), help = $ssl, value_parser = parse_bool, num_args = 0..=1,
                  default_missing_value = "true", default_value = "false", action = ArgAction::Set)]
            pub use_ssl: bool,
            #[arg(help_heading = $heading, id = concat!($p, "_use_ssl_mutual"), long = concat!($p, "-use-ssl-mutual"),
                  value_name = concat!($P, "_USE_SSL_MUTUAL"), env = concat!("TRITONRS_", $P, "_USE_SSL_MUTUAL"),
                  help = $mutual, value_parser = parse_bool, num_args = 0..=1, default_missing_value = "true",
                  default_value = "false", action = ArgAction::Set)]
            pub use_ssl_mutual: bool,
            #[arg(help_heading = $heading, id = concat!($p, "_server_cert"), long = concat!($p, "-server-cert"),
                  value_name = concat!($P, "_SERVER_CERT"), env = concat!("TRITONRS_", $P, "_SERVER_CERT"), help = $cert)]
            pub server_cert: Option<PathBuf>,
            #[arg(help_heading = $heading, id = concat!($p, "_server_key"), long = concat!($p, "-server-key"),
                  value_name = concat!($P, "_SERVER_KEY"), env = concat!("TRITONRS_", $P, "_SERVER_KEY"), help = $key)]
            pub server_key: Option<PathBuf>,
            #[arg(help_heading = $heading, id = concat!($p, "_root_cert"), long = concat!($p, "-root-cert"),
                  value_name = concat!($P, "_ROOT_CERT"), env = concat!("TRITONRS_", $P, "_ROOT_CERT"), help = $root)]
            pub root_cert: Option<PathBuf>,
            #[arg(help_heading = $heading, long = $restrict_long, env = $restrict_env, help = $restrict_help, value_delimiter = ';')]
            pub $restrict: Vec<String>,
        }

        impl $name {
            /// The TLS flags, as `frontend::tls::TlsFiles::from_flags` takes them after the prefix.
            pub fn tls(&self) -> (bool, bool, Option<&std::path::Path>, Option<&std::path::Path>, Option<&std::path::Path>) {
                let (cert, key, root) = (self.server_cert.as_deref(), self.server_key.as_deref(), self.root_cert.as_deref());
                (self.use_ssl, self.use_ssl_mutual, cert, key, root)
            }
        }
    };
}

tls_args!(
    HttpTlsArgs,
    "http",
    "HTTP",
    "HTTP",
    [
        "Serve HTTPS on the HTTP port (tritonserver has no TLS on HTTP); needs --http-server-cert and --http-server-key",
        "HTTPS with client certificates signed by --http-root-cert (implies --http-use-ssl)",
        "PEM certificate (chain) of the HTTPS server",
        "PEM private key of the HTTPS server",
        "PEM root certificate that client certificates must be signed by (mutual TLS)"
    ],
    http_restricted_api,
    "http-restricted-api",
    "TRITONRS_HTTP_RESTRICTED_API",
    "Restricts HTTP API groups to requests with a header, as `<api>[,<api>...]:<key>=<value>` (repeatable). APIs: \
     health, metadata, inference, shared-memory, model-config, model-repository, statistics, trace, logging"
);

tls_args!(
    GrpcTlsArgs,
    "grpc",
    "GRPC",
    "gRPC",
    [
        "Serve gRPC over TLS; needs --grpc-server-cert and --grpc-server-key",
        "gRPC over TLS with client certificates signed by --grpc-root-cert (takes precedence over --grpc-use-ssl, as \
         in tritonserver)",
        "PEM certificate (chain) of the gRPC server",
        "PEM private key of the gRPC server",
        "PEM root certificate that client certificates must be signed by (mutual TLS)"
    ],
    grpc_restricted_protocol,
    "grpc-restricted-protocol",
    "TRITONRS_GRPC_RESTRICTED_PROTOCOL",
    "Restricts gRPC protocol groups to calls with the metadata entry `triton-grpc-protocol-<key>`, as \
     `<protocol>[,...]:<key>=<value>` (repeatable); the groups are --http-restricted-api's"
);

/// Flags of the server itself.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub repository: RepositoryArgs,
    /// How models are loaded: none (all at start), explicit (--load-model plus the API), poll (follow the repository).
    #[arg(help_heading = "Repository", long, env = "TRITONRS_MODEL_CONTROL_MODE", value_enum, default_value = "none")]
    pub model_control_mode: ControlMode,
    /// Model to load at start in explicit mode (repeatable); `*` loads all.
    #[arg(help_heading = "Repository", long, env = "TRITONRS_LOAD_MODEL", value_delimiter = ',')]
    pub load_model: Vec<String>,
    /// Seconds between repository scans in poll mode.
    #[arg(help_heading = "Repository", long, env = "TRITONRS_REPOSITORY_POLL_SECS", default_value_t = 15)]
    pub repository_poll_secs: u64,
    /// tritonserver's cloud credential file (JSON: per cloud, credentials keyed by repository URL
    /// prefix) for s3://, gs:// and as:// repositories.
    #[arg(help_heading = "Repository", long, env = "TRITON_CLOUD_CREDENTIAL_PATH")]
    pub cloud_credential_path: Option<PathBuf>,
    /// Where cloud repositories are cached [default: $CACHE_DIRECTORY under systemd, else
    /// $XDG_CACHE_HOME/tritonrs or ~/.cache/tritonrs].
    #[arg(help_heading = "Repository", long, env = "TRITONRS_REPOSITORY_CACHE_DIR")]
    pub repository_cache_dir: Option<PathBuf>,
    /// Largest file a cloud repository may hold, in MiB; a model with a bigger one is not downloaded
    /// (its listed size says so before anything is fetched). `config.pbtxt` and label files have
    /// the smaller bounds the server reads them with.
    #[arg(help_heading = "Repository", long, env = "TRITONRS_REPOSITORY_MAX_FILE_MB", default_value_t = crate::storage::DEFAULT_MAX_FILE_MB,
          value_parser = clap::value_parser!(u64).range(1..=(u64::MAX >> 20)))]
    pub repository_max_file_mb: u64,
    #[command(flatten)]
    pub model_config: ModelConfigArgs,
    #[command(flatten)]
    pub loading: loading::LoadingArgs,
    /// Ready only when every model is READY (true), or whenever the server is up (false).
    #[arg(help_heading = "Repository", long, env = "TRITONRS_STRICT_READINESS", value_parser = parse_bool, num_args = 0..=1,
          default_missing_value = "true", default_value = "true", action = ArgAction::Set)]
    pub strict_readiness: bool,
    /// Exit if a model fails to load during start-up. Unlike tritonserver the default is false: on an
    /// appliance one bad model must not take the others down.
    #[arg(help_heading = "Repository", long, env = "TRITONRS_EXIT_ON_ERROR", value_parser = parse_bool, num_args = 0..=1,
          default_missing_value = "true", default_value = "false", action = ArgAction::Set)]
    pub exit_on_error: bool,
    /// Seconds to wait for in-flight requests at shutdown.
    #[arg(help_heading = "Server", long, env = "TRITONRS_EXIT_TIMEOUT_SECS", default_value_t = 30)]
    pub exit_timeout_secs: u64,
    /// Models loaded in parallel.
    #[arg(help_heading = "Repository", long, env = "TRITONRS_MODEL_LOAD_THREAD_COUNT", default_value_t = 4)]
    pub model_load_thread_count: usize,
    /// Serve HTTP/REST.
    #[arg(help_heading = "HTTP", long, env = "TRITONRS_ALLOW_HTTP", value_parser = parse_bool, num_args = 0..=1,
          default_missing_value = "true", default_value = "true", action = ArgAction::Set)]
    pub allow_http: bool,
    /// Address the HTTP server binds.
    #[arg(help_heading = "HTTP", long, env = "TRITONRS_HTTP_ADDRESS", default_value = "0.0.0.0")]
    pub http_address: String,
    /// HTTP port; 0 picks a free port (the log says which).
    #[arg(help_heading = "HTTP", long, env = "TRITONRS_HTTP_PORT", default_value_t = 8000)]
    pub http_port: u16,
    /// Largest accepted HTTP request body in bytes, after decompression (413 beyond it).
    #[arg(help_heading = "HTTP", long, env = "TRITONRS_HTTP_MAX_INPUT_SIZE", default_value_t = 64 * 1024 * 1024)]
    pub http_max_input_size: usize,
    /// Seconds a client has to send a request's head (line and headers) on HTTP and metrics
    /// connections, from the connection's start or the head's first byte; 0: no limit.
    #[arg(help_heading = "HTTP", long, env = "TRITONRS_HTTP_HEADER_TIMEOUT_SECS", default_value_t = 30)]
    pub http_header_timeout_secs: u64,
    /// Seconds an HTTP or metrics connection may stay open with no request in flight; 0: no limit.
    #[arg(help_heading = "HTTP", long, env = "TRITONRS_HTTP_IDLE_TIMEOUT_SECS", default_value_t = 300)]
    pub http_idle_timeout_secs: u64,
    /// Most HTTP connections open at once; at the cap the oldest idle one is closed for a newcomer.
    /// 0: from the open-file limit, (limit - 320) / 2 with both HTTP and gRPC on.
    #[arg(help_heading = "HTTP", long, env = "TRITONRS_HTTP_MAX_CONNECTIONS", default_value_t = 0)]
    pub http_max_connections: usize,
    /// Let several servers listen on the HTTP port (SO_REUSEPORT), each with this set; the kernel
    /// spreads new connections among them.
    #[arg(help_heading = "HTTP", long, env = "TRITONRS_REUSE_HTTP_PORT", value_parser = parse_bool, num_args = 0..=1,
          default_missing_value = "true", default_value = "false", action = ArgAction::Set)]
    pub reuse_http_port: bool,
    /// Worker threads of the I/O runtime that serves HTTP. tritonrs has one such runtime for HTTP,
    /// gRPC and metrics (inference runs on the backends' own threads); default: one per CPU core, or
    /// with `--io-cpu-cores` one per core it lists.
    #[arg(help_heading = "HTTP", long, env = "TRITONRS_HTTP_THREAD_COUNT",
          value_parser = clap::value_parser!(u16).range(1..))]
    pub http_thread_count: Option<u16>,
    /// Pins that runtime's worker threads to these cores (`0`, `0-1`, `0,2`). With `--host-policy`
    /// pinning a model's instance threads to the same cores, a request's hand-offs between the two stay
    /// on one core, which is far cheaper where waking an idle core is slow (virtual machines: 11 µs
    /// against 67 µs a hand-off). Without `--http-thread-count`, the runtime has one worker per core
    /// listed. ONNX Runtime's thread pools are not pinned by it. Unset: not pinned.
    #[arg(help_heading = "HTTP", long, env = "TRITONRS_IO_CPU_CORES", value_name = "CORES",
          value_parser = parse_cores)]
    pub io_cpu_cores: Option<CpuList>,
    #[command(flatten)]
    pub http_tls: HttpTlsArgs,
    /// The image model that DeepStack's `POST /v1/vision/detection` runs (Frigate's, Blue Iris's and
    /// Double Take's deepstack detectors); unset, that endpoint answers 404.
    /// `/v1/vision/custom/<model>` serves any image model either way.
    #[arg(help_heading = "HTTP", long, env = "TRITONRS_DEEPSTACK_DETECTION_MODEL")]
    pub deepstack_detection_model: Option<String>,
    /// Serve gRPC (Triton's GRPCInferenceService and grpc.health.v1).
    #[arg(help_heading = "gRPC", long, env = "TRITONRS_ALLOW_GRPC", value_parser = parse_bool, num_args = 0..=1,
          default_missing_value = "true", default_value = "true", action = ArgAction::Set)]
    pub allow_grpc: bool,
    /// Address the gRPC server binds.
    #[arg(help_heading = "gRPC", long, env = "TRITONRS_GRPC_ADDRESS", default_value = "0.0.0.0")]
    pub grpc_address: String,
    /// gRPC port; 0 picks a free port (the log says which).
    #[arg(help_heading = "gRPC", long, env = "TRITONRS_GRPC_PORT", default_value_t = 8001)]
    pub grpc_port: u16,
    /// Largest gRPC message received or sent, in bytes (RESOURCE_EXHAUSTED beyond it).
    #[arg(help_heading = "gRPC", long, env = "TRITONRS_GRPC_MAX_MESSAGE_SIZE", default_value_t = 64 * 1024 * 1024)]
    pub grpc_max_message_size: usize,
    /// Accepted, with no effect: tritonrs allocates each call's request and response objects per
    /// call and keeps no pool of them to size.
    #[arg(help_heading = "gRPC", long, env = "TRITONRS_GRPC_INFER_ALLOCATION_POOL_SIZE", default_value_t = 8)]
    pub grpc_infer_allocation_pool_size: u64,
    #[command(flatten)]
    pub grpc_tls: GrpcTlsArgs,
    /// Seconds a gRPC connection has to send its first request's headers (connection preface
    /// included); 0: no limit.
    #[arg(help_heading = "gRPC", long, env = "TRITONRS_GRPC_HEADER_TIMEOUT_SECS", default_value_t = 30)]
    pub grpc_header_timeout_secs: u64,
    /// Most gRPC connections open at once; at the cap the oldest idle one is closed for a newcomer.
    /// 0: from the open-file limit, as --http-max-connections.
    #[arg(help_heading = "gRPC", long, env = "TRITONRS_GRPC_MAX_CONNECTIONS", default_value_t = 0)]
    pub grpc_max_connections: usize,
    /// Milliseconds between HTTP/2 keepalive pings the server sends; 0: none.
    #[arg(help_heading = "gRPC", long, env = "TRITONRS_GRPC_KEEPALIVE_TIME", default_value_t = 7_200_000)]
    pub grpc_keepalive_time: u64,
    /// Milliseconds to wait for a keepalive ping's acknowledgement before closing the connection.
    #[arg(help_heading = "gRPC", long, env = "TRITONRS_GRPC_KEEPALIVE_TIMEOUT", default_value_t = 20_000)]
    pub grpc_keepalive_timeout: u64,
    /// Accepted, with no effect: hyper's HTTP/2 server sends its keepalive pings with or without
    /// calls in flight (as if true) and has no setting to stop that.
    #[arg(help_heading = "gRPC", long, env = "TRITONRS_GRPC_KEEPALIVE_PERMIT_WITHOUT_CALLS", value_parser = parse_bool, num_args = 0..=1,
          default_missing_value = "true", default_value = "false", action = ArgAction::Set)]
    pub grpc_keepalive_permit_without_calls: bool,
    /// Accepted, with no effect: hyper sends one keepalive ping per --grpc-keepalive-time whether data
    /// flows or not, with no limit (as 0 here).
    #[arg(help_heading = "gRPC", long, env = "TRITONRS_GRPC_HTTP2_MAX_PINGS_WITHOUT_DATA", default_value_t = 2)]
    pub grpc_http2_max_pings_without_data: i64,
    /// Accepted, with no effect: hyper's HTTP/2 server answers every client ping and does not police
    /// their interval (no ping strikes, as 0 here).
    #[arg(
        help_heading = "gRPC",
        long,
        env = "TRITONRS_GRPC_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA",
        default_value_t = 300_000
    )]
    pub grpc_http2_min_recv_ping_interval_without_data: i64,
    /// Accepted, with no effect: hyper's HTTP/2 server counts no bad pings and never closes a
    /// connection for them (as 0 here).
    #[arg(help_heading = "gRPC", long, env = "TRITONRS_GRPC_HTTP2_MAX_PING_STRIKES", default_value_t = 2)]
    pub grpc_http2_max_ping_strikes: i64,
    /// Milliseconds after which a gRPC connection is asked to go away (GOAWAY; clients reconnect);
    /// unset: no limit.
    #[arg(help_heading = "gRPC", long, env = "TRITONRS_GRPC_MAX_CONNECTION_AGE")]
    pub grpc_max_connection_age: Option<u64>,
    /// Milliseconds a connection past its age may take to finish its calls before it is closed.
    #[arg(help_heading = "gRPC", long, env = "TRITONRS_GRPC_MAX_CONNECTION_AGE_GRACE")]
    pub grpc_max_connection_age_grace: Option<u64>,
    /// Let several servers listen on the gRPC port (SO_REUSEPORT), each with this set.
    #[arg(help_heading = "gRPC", long, env = "TRITONRS_REUSE_GRPC_PORT", value_parser = parse_bool, num_args = 0..=1,
          default_missing_value = "true", default_value = "false", action = ArgAction::Set)]
    pub reuse_grpc_port: bool,
    /// Compress infer responses in an encoding the client accepts (gzip or deflate): none, low,
    /// medium or high. tonic has one level (zlib's 6), so low, medium and high compress alike.
    #[arg(
        help_heading = "gRPC",
        long,
        env = "TRITONRS_GRPC_INFER_RESPONSE_COMPRESSION_LEVEL",
        value_enum,
        default_value = "none"
    )]
    pub grpc_infer_response_compression_level: CompressionLevel,
    /// Serve Prometheus metrics at /metrics on --metrics-port.
    #[arg(help_heading = "Metrics", long, env = "TRITONRS_ALLOW_METRICS", value_parser = parse_bool, num_args = 0..=1,
          default_missing_value = "true", default_value = "true", action = ArgAction::Set)]
    pub allow_metrics: bool,
    /// Address the metrics server binds.
    #[arg(help_heading = "Metrics", long, env = "TRITONRS_METRICS_ADDRESS", default_value = "0.0.0.0")]
    pub metrics_address: String,
    /// Metrics port; 0 picks a free port (the log says which).
    #[arg(help_heading = "Metrics", long, env = "TRITONRS_METRICS_PORT", default_value_t = 8002)]
    pub metrics_port: u16,
    /// Report CPU utilization and memory (nv_cpu_*) in the metrics.
    #[arg(help_heading = "Metrics", long, env = "TRITONRS_ALLOW_CPU_METRICS", value_parser = parse_bool, num_args = 0..=1,
          default_missing_value = "true", default_value = "true", action = ArgAction::Set)]
    pub allow_cpu_metrics: bool,
    /// Report GPU utilization, memory and power (nv_gpu_*, from NVML), and on Jetson the GPU load,
    /// clock, temperatures, power rails and power mode from sysfs (tritonrs_jetson_*).
    #[arg(help_heading = "Metrics", long, env = "TRITONRS_ALLOW_GPU_METRICS", value_parser = parse_bool, num_args = 0..=1,
          default_missing_value = "true", default_value = "true", action = ArgAction::Set)]
    pub allow_gpu_metrics: bool,
    /// How often CPU, memory and GPU readings are refreshed, in milliseconds.
    #[arg(help_heading = "Metrics", long, env = "TRITONRS_METRICS_INTERVAL_MS", default_value_t = 2000,
          value_parser = parse_millis)]
    pub metrics_interval_ms: u64,
    /// Verbose logging level; 0 is off.
    #[arg(help_heading = "Logging", long, env = "TRITONRS_LOG_VERBOSE", default_value_t = 0)]
    pub log_verbose: u32,
    /// Log informational messages.
    #[arg(help_heading = "Logging", long, env = "TRITONRS_LOG_INFO", value_parser = parse_bool, num_args = 0..=1,
          default_missing_value = "true", default_value = "true", action = ArgAction::Set)]
    pub log_info: bool,
    /// Log warnings.
    #[arg(help_heading = "Logging", long, env = "TRITONRS_LOG_WARNING", value_parser = parse_bool, num_args = 0..=1,
          default_missing_value = "true", default_value = "true", action = ArgAction::Set)]
    pub log_warning: bool,
    /// Log errors.
    #[arg(help_heading = "Logging", long, env = "TRITONRS_LOG_ERROR", value_parser = parse_bool, num_args = 0..=1,
          default_missing_value = "true", default_value = "true", action = ArgAction::Set)]
    pub log_error: bool,
    /// Write the log to this file instead of standard error.
    #[arg(help_heading = "Logging", long, env = "TRITONRS_LOG_FILE")]
    pub log_file: Option<PathBuf>,
    /// Log format: default or ISO8601.
    #[arg(help_heading = "Logging", long, env = "TRITONRS_LOG_FORMAT", default_value = "default")]
    pub log_format: String,
    /// Rate limiting of model instances: off, or execution_count (an instance runs only while it holds
    /// the resources its instance group's `rate_limiter` declares).
    #[arg(help_heading = "Rate limiter", long, env = "TRITONRS_RATE_LIMIT", default_value = "off")]
    pub rate_limit: String,
    /// Size of a rate-limiter resource pool, as `<name>:<count>` or `<name>:<count>:<device>` (repeatable).
    #[arg(help_heading = "Rate limiter", long, env = "TRITONRS_RATE_LIMIT_RESOURCE")]
    pub rate_limit_resource: Vec<String>,
    /// Response cache settings, as `<cache>,<setting>=<value>` (repeatable, one setting each);
    /// `local,size=<bytes>` enables the in-memory LRU cache for models whose config has
    /// `response_cache { enable: true }`; `redis,host=<host>` and `redis,port=<port>` (plus `password`,
    /// `db`, `socket_timeout`, `tls_enabled`, ... as in tritonserver's redis cache) keep it in Redis,
    /// shared by every server pointed there.
    #[arg(long, env = "TRITONRS_CACHE_CONFIG", help_heading = "Cache")]
    pub cache_config: Vec<String>,
    /// Where response-cache libraries are installed (TRITONCACHE API; default /opt/tritonserver/caches):
    /// `--cache-config <name>,...` with a name other than `local` and `redis` (built in) loads
    /// `<dir>/<name>/libtritoncache_<name>.so`. `local` is tritonrs's built-in cache unless this flag is
    /// given and `<dir>/local/libtritoncache_local.so` exists there.
    #[arg(long, env = "TRITONRS_CACHE_DIRECTORY", help_heading = "Cache")]
    pub cache_directory: Option<std::path::PathBuf>,
    /// Size of the local response cache in bytes (tritonserver's older flag; same as
    /// `--cache-config local,size=<bytes>`).
    #[arg(help_heading = "Cache", long, env = "TRITONRS_RESPONSE_CACHE_BYTE_SIZE")]
    pub response_cache_byte_size: Option<usize>,
    /// Server identifier, reported as the name in server metadata.
    #[arg(help_heading = "Server", long, env = "TRITONRS_ID", default_value = "triton")]
    pub id: String,
    /// Trace settings (repeatable): `level=<OFF|TIMESTAMPS|TENSORS>` (levels combine), `rate=<N>` (trace
    /// every N-th request, default 1000), `count=<N>` (stop after N traces, -1 = no limit), `mode=triton`,
    /// and for the triton mode `triton,file=<path>` (the JSON trace file) and `triton,log-frequency=<N>`
    /// (write `<path>.<n>` every N traces; 0 writes `<path>` at shutdown).
    #[arg(help_heading = "Trace", long, env = "TRITONRS_TRACE_CONFIG", value_delimiter = ';')]
    pub trace_config: Vec<String>,
    /// Deprecated: use --trace-config triton,file=<path>.
    #[arg(help_heading = "Trace", long, env = "TRITONRS_TRACE_FILE")]
    pub trace_file: Option<String>,
    /// Deprecated: use --trace-config level=<OFF|TIMESTAMPS|TENSORS> (repeatable; levels combine).
    #[arg(help_heading = "Trace", long, env = "TRITONRS_TRACE_LEVEL", value_delimiter = ',')]
    pub trace_level: Vec<String>,
    /// Deprecated: use --trace-config rate=<N>.
    #[arg(help_heading = "Trace", long, env = "TRITONRS_TRACE_RATE")]
    pub trace_rate: Option<u32>,
    /// Deprecated: use --trace-config count=<N>.
    #[arg(help_heading = "Trace", long, env = "TRITONRS_TRACE_COUNT", allow_negative_numbers = true)]
    pub trace_count: Option<i32>,
    /// Deprecated: use --trace-config triton,log-frequency=<N>.
    #[arg(help_heading = "Trace", long, env = "TRITONRS_TRACE_LOG_FREQUENCY")]
    pub trace_log_frequency: Option<u32>,
    #[command(flatten)]
    pub mqtt: mqtt::MqttArgs,
    #[command(flatten)]
    pub frigate: frigate::FrigateArgs,
    #[command(flatten)]
    pub memory: memory::MemoryArgs,
    #[command(flatten)]
    pub compat: compat::ServeCompatArgs,
    #[command(flatten)]
    pub metrics_config: metrics::MetricsConfigArgs,
    #[command(flatten)]
    pub hosted: hosted::HostedArgs,
}

impl ServeArgs {
    /// The I/O runtime's worker count: `--http-thread-count` when given; else, with `--io-cpu-cores`,
    /// one worker per core listed, since two workers pinned to one core never run at once and the
    /// second only adds wake-ups (each time tokio wakes a worker, that worker wakes another to look for
    /// more work); else `None`, tokio's default of one per CPU core.
    pub fn io_worker_count(&self) -> Option<usize> {
        match (self.http_thread_count, &self.io_cpu_cores) {
            (Some(n), _) => Some(n.into()),
            (None, Some(cores)) if !cores.0.is_empty() => {
                Some(cores.0.iter().collect::<std::collections::BTreeSet<_>>().len())
            }
            _ => None,
        }
    }
}

impl ModelConfigArgs {
    /// `--backend-config` parsed, with `--backend-directory` among the global settings, where Triton
    /// puts it too (every backend library sees it in its configuration).
    pub fn backend_config(&self) -> crate::error::Result<crate::model_api::BackendConfig> {
        let mut c = crate::model_api::BackendConfig::parse(&self.backend_config)?;
        c.from_config_file = self.backend_config_from_file;
        c.global.entry("backend-directory".into()).or_insert_with(|| self.backend_directory.display().to_string());
        c.global.entry("repoagent-directory".into()).or_insert_with(|| self.repoagent_directory.display().to_string());
        Ok(c)
    }
}

/// A list of CPU cores, as `--io-cpu-cores` takes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuList(pub Vec<usize>);

fn parse_cores(list: &str) -> Result<CpuList, String> {
    crate::platform::affinity::parse_cpu_list(list).map(CpuList)
}

#[cfg(test)]
mod tests;
