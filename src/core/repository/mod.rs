//! Model repositories on disk: scanning, version folders, `config.pbtxt` parsing, auto-complete and
//! validation. Nothing here loads a model; it only decides what a model is.

pub mod limits;
pub mod namespace;
pub mod remote;
pub mod version_policy;

use crate::core::scheduler::ensemble::graph::EnsembleGraph;
use crate::error::{Error, Result};
use crate::model_config::{
    autocomplete, list_versions, model_file, model_filename, paths, pbtxt, Completers, ConfigFailure,
};
use crate::proto::inference::model_config::SchedulingChoice;
use crate::proto::inference::model_sequence_batching::initial_state::StateData;
use crate::proto::inference::model_sequence_batching::StrategyChoice;
use crate::proto::inference::model_warmup::input::InputDataType;
use crate::proto::inference::{
    model_instance_group::Kind, model_optimization_policy, model_version_policy, ModelConfig, ModelInstanceGroup,
    ModelVersionPolicy,
};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use remote::{RemoteRepository, SyncProgress, SyncScope};
pub use version_policy::VersionPolicy;

/// How configurations are completed; built from the server flags.
#[derive(Debug, Clone)]
pub struct RepoOptions {
    /// `--disable-auto-complete-config` / `--strict-model-config` turn this off.
    pub autocomplete: bool,
    /// The batch size auto-complete gives batchable models (Triton's `default-max-batch-size`, 4).
    pub default_max_batch_size: i32,
    /// What completes configurations beyond the model file's I/O, per backend (a TensorRT engine, a
    /// Python model's `auto_complete_config`); given by whoever assembles the server.
    pub completers: Completers,
    /// Largest tensor built from a configuration (warmup samples, initial state): the largest request
    /// the server accepts.
    pub max_tensor_bytes: usize,
    /// Runs the repository agents models name; given by whoever assembles the server.
    pub agents: crate::model_api::agents::Agents,
    /// `--model-config-name`: each model's `configs/<name>.pbtxt` is read in place of `config.pbtxt`
    /// where it exists.
    pub config_name: Option<String>,
    /// `--model-load-retry-count`: how many more times a version whose load fails is loaded.
    pub load_retry_count: u32,
    /// `--host-policy`: the cores of each named policy, for instance groups' `host_policy`.
    pub host_policies: Arc<crate::platform::affinity::HostPolicies>,
    /// `--model-load-gpu-limit`: the fraction of each GPU's memory in use above which loads are refused.
    pub gpu_limits: Arc<crate::platform::gpu_limit::GpuLimits>,
    /// `--model-namespacing`: a name in several repositories is served once per repository (see
    /// [`namespace`]) instead of being an error.
    pub namespacing: bool,
}

impl Default for RepoOptions {
    fn default() -> Self {
        RepoOptions {
            autocomplete: true,
            default_max_batch_size: 4,
            completers: Default::default(),
            max_tensor_bytes: limits::DEFAULT_MAX_TENSOR_BYTES,
            agents: Default::default(),
            config_name: None,
            load_retry_count: 0,
            host_policies: Default::default(),
            gpu_limits: Default::default(),
            namespacing: false,
        }
    }
}

/// Finds the model folders in every repository. A model name found in more than one repository is an
/// error for that model only.
pub fn scan(repos: &[PathBuf]) -> (BTreeMap<String, Result<PathBuf>>, Vec<Error>) {
    scan_ns(repos, false)
}

/// [`scan`], where with `namespacing` a name found in several repositories is one model per repository,
/// each under its [`namespace::qualify`]d key.
pub fn scan_ns(repos: &[PathBuf], namespacing: bool) -> (BTreeMap<String, Result<PathBuf>>, Vec<Error>) {
    let mut all: BTreeMap<String, Vec<(&Path, PathBuf)>> = BTreeMap::new();
    let mut errors = Vec::new();
    for repo in repos {
        let entries = match std::fs::read_dir(repo) {
            Ok(e) => e,
            Err(e) => {
                errors.push(Error::invalid(format!("cannot read model repository '{}': {e}", repo.display())));
                continue;
            }
        };
        let mut names: Vec<(String, PathBuf)> = entries
            .filter_map(|e| e.ok())
            .filter(|e| e.path().is_dir())
            .filter_map(|e| Some((e.file_name().into_string().ok()?, e.path())))
            .filter(|(n, _)| !n.starts_with('.'))
            .collect();
        names.sort();
        for (name, path) in names {
            all.entry(name).or_default().push((repo.as_path(), path));
        }
    }
    let mut found = BTreeMap::new();
    for (name, mut places) in all {
        if places.len() == 1 {
            found.insert(name, Ok(places.remove(0).1));
        } else if namespacing {
            for (repo, path) in places {
                found.insert(namespace::qualify(&name, &namespace::absolute(repo)), Ok(path));
            }
        } else {
            let msg = format!(
                "model '{name}' appears in more than one model repository ('{}' and '{}')",
                places[0].1.display(),
                places[1].1.display()
            );
            found.insert(name, Err(Error::invalid(msg)));
        }
    }
    (found, errors)
}

/// Reads, completes and validates the configuration of the model in `dir`.
///
/// `override_json` is the load API's `config` parameter: it replaces `config.pbtxt` entirely.
pub fn read_model_config(
    dir: &Path,
    name: &str,
    opts: &RepoOptions,
    override_json: Option<&str>,
) -> Result<ModelConfig> {
    read_model_config_detailed(dir, name, opts, override_json).map_err(|f| f.error)
}

/// [`read_model_config`], telling a version's model file failing apart from the configuration failing.
pub fn read_model_config_detailed(
    dir: &Path,
    name: &str,
    opts: &RepoOptions,
    override_json: Option<&str>,
) -> Result<ModelConfig, ConfigFailure> {
    let cfg = read_declared_config(dir, name, opts, override_json)?;
    complete_config(dir, name, opts, cfg, override_json.is_some())
}

/// The configuration as the model declares it (its `config.pbtxt`, or `override_json` from a load
/// request), before anything reads the model's files: what the repository agents run from.
pub fn read_declared_config(
    dir: &Path,
    name: &str,
    opts: &RepoOptions,
    override_json: Option<&str>,
) -> Result<ModelConfig> {
    let cfg_path = config_path(dir, opts);
    let too_large = |what: String, len: usize| {
        Error::invalid(format!(
            "{what} is {len} bytes, over the limit of {} bytes for a model configuration",
            limits::MAX_CONFIG_BYTES
        ))
    };
    let mut cfg = match override_json {
        Some(json) if json.len() > limits::MAX_CONFIG_BYTES => {
            return Err(too_large(format!("the 'config' parameter for model '{name}'"), json.len()))
        }
        Some(json) => pbtxt::config_from_json(json)
            .map_err(|e| Error::invalid(format!("invalid 'config' parameter for model '{name}': {e}")))?,
        None if cfg_path.is_file() => {
            let bytes = limits::read_file_bounded(
                &cfg_path,
                limits::MAX_CONFIG_BYTES as u64,
                false,
                &format!("'{}'", cfg_path.display()),
            )?;
            let text = String::from_utf8(bytes)
                .map_err(|_| Error::invalid(format!("'{}' is not UTF-8 text", cfg_path.display())))?;
            pbtxt::parse_config(&text, &cfg_path.display().to_string()).map_err(|e| Error::invalid(e.to_string()))?
        }
        None if opts.autocomplete => ModelConfig::default(),
        None => {
            return Err(Error::invalid(format!(
                "model '{name}' has no '{}' and auto-complete is disabled",
                cfg_path.display()
            )))
        }
    };
    if cfg.name.is_empty() {
        cfg.name = name.to_string();
    } else if cfg.name != name {
        let source = match override_json {
            Some(_) => "the 'config' parameter".to_string(),
            None => cfg_path.display().to_string(),
        };
        return Err(Error::invalid(format!(
            "{source}: field 'name': the configuration names model '{}' but the model is '{name}'",
            cfg.name
        )));
    }
    Ok(cfg)
}

/// The configuration file of the model in `dir`: `configs/<name>.pbtxt` under `--model-config-name`
/// when the model has that file, else `config.pbtxt` (tritonserver 2.51 falls back the same way).
pub fn config_path(dir: &Path, opts: &RepoOptions) -> PathBuf {
    if let Some(name) = &opts.config_name {
        let custom = dir.join("configs").join(format!("{name}.pbtxt"));
        if custom.is_file() {
            return custom;
        }
    }
    dir.join("config.pbtxt")
}

/// Completes and checks a declared configuration against the model's folder `dir`: versions, backend,
/// file names, auto-complete from the model file and the backend, limits and validation.
/// `from_request`: the configuration came from a load request.
pub fn complete_config(
    dir: &Path,
    name: &str,
    opts: &RepoOptions,
    mut cfg: ModelConfig,
    from_request: bool,
) -> Result<ModelConfig, ConfigFailure> {
    let versions = list_versions(dir);
    if versions.is_empty() {
        return Err(Error::invalid(format!(
            "model '{name}' has no version folder in '{}': a version is a folder named by a number, such as \
             '1', holding the model file",
            dir.display()
        ))
        .into());
    }
    resolve_backend(dir, &mut cfg)?;
    if let Some(completer) = opts.completers.get(&cfg.backend) {
        completer.resolve(dir, &mut cfg)?;
    }
    tensorflow_platform(dir, &mut cfg);
    // Names from the configuration are checked before any of them is used to open a file.
    check_paths(&cfg, dir, from_request)?;
    if opts.autocomplete && cfg.backend == "onnxruntime" {
        // Triton completes from the model file of the version that will be served (the latest).
        if let Some(&v) = versions.iter().next_back() {
            let file = model_file(&dir.join(v.to_string()), &cfg)?;
            if file.is_file() {
                let io =
                    autocomplete::read_onnx_io(&file).map_err(|error| ConfigFailure { error, version: Some(v) })?;
                autocomplete::complete_onnx(&mut cfg, &io, opts.default_max_batch_size);
            }
        }
    }
    if opts.autocomplete {
        if let Some(completer) = opts.completers.get(&cfg.backend) {
            cfg = completer.complete(dir, name, cfg)?;
        }
    }
    normalize(&mut cfg);
    // Sizes before anything is built from them (validation itself builds initial states).
    limits::check(&cfg, opts.max_tensor_bytes)?;
    validate(&cfg, dir)?;
    Ok(cfg)
}

/// Checks every file name the configuration gives (see [`paths::confined`]) and, for a configuration
/// from a load request, the Python environment it names: such a request may not point the server at
/// files outside the model's folder. A repository's own `config.pbtxt` may keep its environment
/// elsewhere, as Triton allows.
fn check_paths(cfg: &ModelConfig, dir: &Path, from_request: bool) -> Result<()> {
    let fail = |e: Error| e.context(format!("model '{}'", cfg.name));
    if !cfg.default_model_filename.is_empty() {
        paths::confined(Path::new("."), &cfg.default_model_filename, "default_model_filename").map_err(fail)?;
    }
    for o in cfg.output.iter().filter(|o| !o.label_filename.is_empty()) {
        paths::confined(dir, &o.label_filename, "output.label_filename").map_err(fail)?;
    }
    for w in &cfg.model_warmup {
        for input in w.inputs.values() {
            if let Some(InputDataType::InputDataFile(f)) = &input.input_data_type {
                paths::confined(&dir.join(WARMUP_FOLDER), f, "model_warmup.inputs.input_data_file").map_err(fail)?;
            }
        }
    }
    if let Some(SchedulingChoice::SequenceBatching(s)) = &cfg.scheduling_choice {
        for st in &s.state {
            for init in &st.initial_state {
                if let Some(StateData::DataFile(f)) = &init.state_data {
                    paths::confined(Path::new("."), f, "sequence_batching.state.initial_state.data_file")
                        .map_err(fail)?;
                }
            }
        }
    }
    for lib in cfg.model_operations.iter().flat_map(|o| &o.op_library_filename) {
        let field = "model_operations.op_library_filename";
        if Path::new(lib).is_absolute() {
            // A load request may not make the server load a library from anywhere on the machine.
            if from_request {
                return Err(fail(Error::invalid(format!(
                    "field '{field}': '{}' must be a path inside the model's folder when the configuration comes \
                     from a load request",
                    paths::printable(lib)
                ))));
            }
        } else {
            paths::confined(dir, lib, field).map_err(fail)?;
        }
    }
    if from_request {
        if let Some(p) =
            cfg.parameters.get("EXECUTION_ENV_PATH").map(|p| p.string_value.trim()).filter(|p| !p.is_empty())
        {
            let rel = p.strip_prefix("$$TRITON_MODEL_DIRECTORY/").ok_or_else(|| {
                fail(Error::invalid(format!(
                    "parameter 'EXECUTION_ENV_PATH': '{}' must start with '$$TRITON_MODEL_DIRECTORY/' when the \
                     configuration comes from a load request",
                    paths::printable(p)
                )))
            })?;
            paths::confined(dir, rel, "parameters.EXECUTION_ENV_PATH").map_err(fail)?;
        }
    }
    Ok(())
}

/// For `tritonrs validate`: checks the configuration against the model file of every version it would
/// serve, where the format's inputs and outputs can be read without loading it (ONNX), as the server
/// does when it loads them.
pub fn check_model_files(cfg: &ModelConfig, dir: &Path) -> Result<()> {
    if cfg.backend != "onnxruntime" {
        return Ok(());
    }
    for v in VersionPolicy::from_config(cfg).select(&list_versions(dir)) {
        let at = |e: Error| e.context(format!("version {v}"));
        let file = model_file(&dir.join(v.to_string()), cfg).map_err(at)?;
        if !file.is_file() {
            return Err(at(Error::invalid(format!("model file '{}' not found", file.display()))));
        }
        let io = autocomplete::read_onnx_io(&file).map_err(at)?;
        autocomplete::check_io(cfg, &io, "ONNX model").map_err(at)?;
    }
    Ok(())
}

/// The folder inside a model's folder that holds warmup `input_data_file`s.
pub const WARMUP_FOLDER: &str = "warmup";

/// Derives `backend` from `platform` or from the files present, as Triton does.
fn resolve_backend(dir: &Path, cfg: &mut ModelConfig) -> Result<()> {
    if !cfg.backend.is_empty() {
        return Ok(());
    }
    cfg.backend = match cfg.platform.as_str() {
        "onnxruntime_onnx" => "onnxruntime".into(),
        "tensorrt_plan" => "tensorrt".into(),
        // Served by Triton's own backend libraries (libtriton_<backend>.so) where installed.
        "pytorch_libtorch" => "pytorch".into(),
        "tensorflow_savedmodel" | "tensorflow_graphdef" => "tensorflow".into(),
        "ensemble" => return Ok(()),
        "" => {
            let has = |f: &str| list_versions(dir).iter().any(|v| dir.join(v.to_string()).join(f).exists());
            let named = |ext: &str| cfg.default_model_filename.ends_with(ext);
            if named(".onnx") || has("model.onnx") {
                "onnxruntime".into()
            } else if named(".plan") || has("model.plan") {
                "tensorrt".into()
            } else if named(".py") || has("model.py") {
                "python".into()
            } else if named(".pt") || has("model.pt") {
                "pytorch".into()
            } else if named(".xml") || has("model.xml") {
                "openvino".into()
            } else if named(".savedmodel") || has("model.savedmodel") || named(".graphdef") || has("model.graphdef") {
                "tensorflow".into()
            } else {
                return Err(Error::invalid(format!(
                    "unable to determine the backend for model '{}': the configuration names no backend or \
                     platform and no version folder holds model.onnx, model.plan, model.py or model.xml",
                    cfg.name
                )));
            }
        }
        other => return Err(Error::invalid(format!("model '{}': unknown platform '{other}'", cfg.name))),
    };
    Ok(())
}

/// Backends whose instances never run on an NVIDIA GPU, so that KIND_AUTO is KIND_CPU for them even on
/// a machine with one (a Jetson): the built-in openvino backend, which also serves TensorFlow models,
/// runs on OpenVINO's devices (its TARGET_DEVICE parameter), never on CUDA.
fn runs_on_cpu_only(backend: &str) -> bool {
    matches!(backend, "openvino" | "tensorflow")
}

/// Triton's platform for a TensorFlow model that names none, from its model file: `tensorflow_graphdef`
/// for a `model.graphdef` file, `tensorflow_savedmodel` for a `model.savedmodel` folder (left empty when
/// neither is there). The platform picks the default model file name.
fn tensorflow_platform(dir: &Path, cfg: &mut ModelConfig) {
    if cfg.backend != "tensorflow" || !cfg.platform.is_empty() {
        return;
    }
    let file = cfg.default_model_filename.as_str();
    let has = |name: &str, folder: bool| {
        file == name
            || (file.is_empty()
                && list_versions(dir).iter().any(|v| {
                    let path = dir.join(v.to_string()).join(name);
                    if folder {
                        path.is_dir()
                    } else {
                        path.is_file()
                    }
                }))
    };
    if has("model.graphdef", false) {
        cfg.platform = "tensorflow_graphdef".into();
    } else if has("model.savedmodel", true) {
        cfg.platform = "tensorflow_savedmodel".into();
    }
}

/// Fills in the defaults Triton always applies, with or without auto-complete.
fn normalize(cfg: &mut ModelConfig) {
    if cfg.version_policy.as_ref().and_then(|p| p.policy_choice.as_ref()).is_none() {
        cfg.version_policy = Some(ModelVersionPolicy {
            policy_choice: Some(model_version_policy::PolicyChoice::Latest(model_version_policy::Latest {
                num_versions: 1,
            })),
        });
    }
    if cfg.platform == "ensemble" {
        // An ensemble has no instances and no optimization settings (Triton refuses both); like
        // Triton, it reports a non-decoupled transaction policy.
        cfg.model_transaction_policy.get_or_insert_with(Default::default);
        return;
    }
    // Triton always reports pinned host buffers as enabled unless the config says otherwise.
    let opt = cfg.optimization.get_or_insert_with(Default::default);
    let pinned = || Some(model_optimization_policy::PinnedMemoryBuffer { enable: true });
    if opt.input_pinned_memory.is_none() {
        opt.input_pinned_memory = pinned();
    }
    if opt.output_pinned_memory.is_none() {
        opt.output_pinned_memory = pinned();
    }
    // As Triton names groups: the default group after the model, a configured group without a name
    // after the model and its index (so instances are `<model>_0_0`, `<model>_0_1`, ...).
    if cfg.instance_group.is_empty() {
        cfg.instance_group.push(ModelInstanceGroup { name: cfg.name.clone(), ..Default::default() });
    }
    for (i, g) in cfg.instance_group.iter_mut().enumerate() {
        if g.name.is_empty() {
            g.name = format!("{}_{i}", cfg.name);
        }
        if g.count < 1 {
            g.count = 1;
        }
        // As Triton: KIND_AUTO runs on the GPUs where usable ones exist (a CUDA driver, and compute
        // capability at or above --min-supported-compute-capability), on the CPU otherwise.
        if g.kind == Kind::Auto as i32 {
            let gpus = if runs_on_cpu_only(&cfg.backend) { Vec::new() } else { crate::platform::cuda::usable_gpus() };
            if gpus.is_empty() {
                g.kind = Kind::Cpu as i32;
            } else {
                g.kind = Kind::Gpu as i32;
                if g.gpus.is_empty() {
                    g.gpus = gpus.iter().map(|gpu| gpu.index).collect();
                }
            }
        }
        // KIND_GPU without `gpus`: every usable GPU, as Triton (GPU 0 where none is usable, so the
        // instance fails to load saying why).
        if g.kind == Kind::Gpu as i32 && g.gpus.is_empty() {
            let gpus: Vec<i32> = crate::platform::cuda::usable_gpus().iter().map(|gpu| gpu.index).collect();
            g.gpus = if gpus.is_empty() { vec![0] } else { gpus };
        }
    }
    let tensorflow = cfg.backend == "tensorflow" && cfg.platform.starts_with("tensorflow_");
    if cfg.default_model_filename.is_empty()
        && (tensorflow || matches!(cfg.backend.as_str(), "onnxruntime" | "python" | "tensorrt"))
    {
        cfg.default_model_filename = model_filename(cfg);
    }
    // Triton reports the sequence batcher's defaults in the configuration: one second of idle time, and
    // the oldest strategy preferring full batches.
    if let Some(SchedulingChoice::SequenceBatching(s)) = cfg.scheduling_choice.as_mut() {
        if s.max_sequence_idle_microseconds == 0 {
            s.max_sequence_idle_microseconds =
                crate::core::scheduler::sequence::policy::DEFAULT_MAX_SEQUENCE_IDLE.as_micros() as u64;
        }
        if let Some(StrategyChoice::Oldest(o)) = s.strategy_choice.as_mut() {
            if o.preferred_batch_size.is_empty() && cfg.max_batch_size > 0 {
                o.preferred_batch_size.push(cfg.max_batch_size);
            }
        }
    }
}

/// Checks a completed configuration for the mistakes Triton rejects at load time.
pub fn validate(cfg: &ModelConfig, dir: &Path) -> Result<()> {
    let ctx = |field: &str, msg: String| field_error(cfg, field, msg);
    let ensemble = cfg.platform == "ensemble";
    if ensemble {
        validate_ensemble(cfg)?;
    } else if matches!(cfg.scheduling_choice, Some(SchedulingChoice::EnsembleScheduling(_))) {
        return Err(ctx(
            "ensemble_scheduling",
            format!("only an ensemble (platform \"ensemble\") may set it, not platform '{}'", cfg.platform),
        ));
    } else if cfg.backend.is_empty() || cfg.backend.contains(['/', '\\', '\0']) || cfg.backend.starts_with('.') {
        // Any other name is a backend library (libtriton_<backend>.so) the load looks for.
        return Err(ctx("backend", format!("'{}' is not a backend name", cfg.backend)));
    }
    if cfg.max_batch_size < 0 {
        return Err(ctx("max_batch_size", format!("must be >= 0, got {}", cfg.max_batch_size)));
    }
    if cfg.input.is_empty() {
        return Err(ctx(
            "input",
            "the model has no inputs; declare them in config.pbtxt or enable auto-complete".into(),
        ));
    }
    if cfg.output.is_empty() {
        return Err(ctx(
            "output",
            "the model has no outputs; declare them in config.pbtxt or enable auto-complete".into(),
        ));
    }
    validate_tensors(cfg)?;
    validate_batch_io(cfg)?;
    // A field tritonrs does not serve fails the load instead of being ignored.
    crate::model_config::support::check(cfg)?;
    // Control inputs, implicit state and initial state files are checked here too, so `tritonrs validate`
    // reports them.
    crate::core::scheduler::sequence::policy::SequencePolicy::from_model(cfg, dir)?;
    validate_label_files(cfg, dir)
}

/// The error for a mistake in `cfg`'s `field`.
fn field_error(cfg: &ModelConfig, field: &str, msg: String) -> Error {
    Error::invalid(format!("model '{}': field '{field}': {msg}", cfg.name))
}

/// Checks every input and output: a name, declared once, a valid data type, valid dims (present unless
/// reshaped or batching), and a reshape with the dims' element count.
fn validate_tensors(cfg: &ModelConfig) -> Result<()> {
    let ctx = |field: &str, msg: String| field_error(cfg, field, msg);
    let mut seen = BTreeSet::new();
    let tensors = cfg
        .input
        .iter()
        .map(|i| ("input", &i.name, i.data_type, &i.dims, i.reshape.as_ref()))
        .chain(cfg.output.iter().map(|o| ("output", &o.name, o.data_type, &o.dims, o.reshape.as_ref())));
    for (field, name, dt, dims, reshape) in tensors {
        if name.is_empty() {
            return Err(ctx(field, "a tensor has no name".into()));
        }
        if !seen.insert((field, name.clone())) {
            return Err(ctx(field, format!("tensor '{name}' is declared twice")));
        }
        if crate::model_api::types::DataType::from_config(dt).is_none() {
            return Err(ctx(field, format!("tensor '{name}' has no valid data_type")));
        }
        if let Some(d) = dims.iter().find(|&&d| d < -1 || d == 0) {
            return Err(ctx(
                field,
                format!("tensor '{name}' has dimension {d}; dimensions must be >= 1, or -1 for a variable size"),
            ));
        }
        if dims.is_empty() && reshape.is_none() && cfg.max_batch_size == 0 {
            return Err(ctx(field, format!("tensor '{name}' has no dims")));
        }
        if let Some(r) = reshape {
            let known = |v: &[i64]| v.iter().all(|&d| d >= 0);
            if known(dims) && known(&r.shape) {
                let n = |v: &[i64]| v.iter().product::<i64>();
                if n(dims) != n(&r.shape) {
                    return Err(ctx(
                        field,
                        format!(
                            "tensor '{name}': reshape {:?} has a different element count than dims {:?}",
                            r.shape, dims
                        ),
                    ));
                }
            }
        }
    }
    Ok(())
}

/// Checks `batch_input` and `batch_output` as Triton does at load (with its messages): one source input,
/// an existing one; batch inputs of TYPE_INT32 or TYPE_FP32; scattered outputs named once, each a
/// configured output.
fn validate_batch_io(cfg: &ModelConfig) -> Result<()> {
    use crate::proto::inference::{batch_input, batch_output, DataType as ConfigType};
    let known_input = |name: &str| cfg.input.iter().any(|i| i.name == name);
    for b in &cfg.batch_input {
        let ctx = |msg: String| field_error(cfg, "batch_input", msg);
        let kind =
            batch_input::Kind::try_from(b.kind).map_err(|_| ctx(format!("unknown batch input kind '{}'", b.kind)))?;
        if b.source_input.len() != 1 {
            return Err(ctx(format!(
                "batch input kind '{}' expects 1 source input, got {}",
                kind.as_str_name(),
                b.source_input.len()
            )));
        }
        if b.data_type != ConfigType::TypeInt32 as i32 && b.data_type != ConfigType::TypeFp32 as i32 {
            return Err(ctx("batch input data type must be TYPE_INT32 or TYPE_FP32".into()));
        }
        if let Some(s) = b.source_input.iter().find(|s| !known_input(s)) {
            return Err(ctx(format!("unknown source input name '{s}'")));
        }
    }
    for b in &cfg.batch_output {
        let ctx = |msg: String| field_error(cfg, "batch_output", msg);
        let kind =
            batch_output::Kind::try_from(b.kind).map_err(|_| ctx(format!("unknown batch output kind '{}'", b.kind)))?;
        if b.source_input.len() != 1 {
            return Err(ctx(format!(
                "batch output kind '{}' expects 1 source input, got {}",
                kind.as_str_name(),
                b.source_input.len()
            )));
        }
        if let Some(s) = b.source_input.iter().find(|s| !known_input(s)) {
            return Err(ctx(format!("unknown source input name '{s}'")));
        }
        let mut seen = BTreeSet::new();
        for t in &b.target_name {
            if !seen.insert(t) {
                return Err(ctx(format!("target output name '{t}' can only be specified once")));
            }
            if !cfg.output.iter().any(|o| o.name == *t) {
                return Err(ctx(format!("unknown target output name '{t}'")));
            }
        }
    }
    Ok(())
}

/// Checks that every output's label file is a file inside the model directory `dir`.
fn validate_label_files(cfg: &ModelConfig, dir: &Path) -> Result<()> {
    for o in &cfg.output {
        if !o.label_filename.is_empty() {
            let path = paths::confined(dir, &o.label_filename, "output.label_filename")
                .map_err(|e| e.context(format!("model '{}'", cfg.name)))?;
            if !path.is_file() {
                return Err(field_error(
                    cfg,
                    "output.label_filename",
                    format!("label file '{}' not found in '{}'", paths::printable(&o.label_filename), dir.display()),
                ));
            }
        }
    }
    Ok(())
}

/// The checks Triton makes on an ensemble's configuration alone: what an ensemble may not set, and its
/// data flow (see [`EnsembleGraph::from_config`]). The checks against the composing models' own
/// configurations happen when it loads, once they serve.
fn validate_ensemble(cfg: &ModelConfig) -> Result<()> {
    let ctx = |field: &str, msg: &str| Error::invalid(format!("model '{}': field '{field}': {msg}", cfg.name));
    if !cfg.instance_group.is_empty() {
        return Err(ctx("instance_group", "an ensemble has no instances; remove 'instance_group'"));
    }
    if cfg.optimization.is_some() {
        return Err(ctx("optimization", "an ensemble cannot set 'optimization'"));
    }
    if !cfg.model_warmup.is_empty() {
        return Err(ctx("model_warmup", "an ensemble cannot set 'model_warmup'"));
    }
    EnsembleGraph::from_config(cfg).map_err(|e| ctx("ensemble_scheduling", &e.message))?;
    Ok(())
}

/// For `tritonrs validate`: checks an ensemble against its composing models' configurations as read
/// from the repositories (`configs`: every model's configuration, or why it is invalid). The server
/// makes the same check at load time against the models it serves.
pub fn check_ensemble_in_repository(cfg: &ModelConfig, configs: &BTreeMap<String, Result<ModelConfig>>) -> Result<()> {
    let graph = EnsembleGraph::from_config(cfg)?;
    let mut composing = Vec::with_capacity(graph.steps().len());
    for (i, step) in graph.steps().iter().enumerate() {
        let prefix = format!("ensemble '{}': step {i}: composing model '{}'", cfg.name, step.model);
        match configs.get(&step.model) {
            Some(Ok(c)) => composing.push(c),
            Some(Err(e)) => return Err(Error::invalid(format!("{prefix} is invalid: {}", e.message))),
            None => return Err(Error::invalid(format!("{prefix} is not in the model repositories"))),
        }
    }
    graph.check_composing(cfg, &composing)
}

/// Reads every output's label file (one label per line), each at most
/// [`limits::MAX_LABEL_FILE_BYTES`].
pub fn read_labels(cfg: &ModelConfig, dir: &Path) -> Result<HashMap<String, Arc<Vec<String>>>> {
    let mut out = HashMap::new();
    for o in cfg.output.iter().filter(|o| !o.label_filename.is_empty()) {
        let path = paths::confined(dir, &o.label_filename, "output.label_filename")
            .map_err(|e| e.context(format!("model '{}'", cfg.name)))?;
        let what = format!("label file '{}' of model '{}'", paths::printable(&o.label_filename), cfg.name);
        let bytes = limits::read_file_bounded(&path, limits::MAX_LABEL_FILE_BYTES, false, &what)?;
        let text = String::from_utf8_lossy(&bytes);
        let lines = text.lines().count();
        if lines > limits::MAX_LABELS {
            return Err(Error::invalid(format!(
                "{what} has {lines} lines, over the limit of {} labels",
                limits::MAX_LABELS
            )));
        }
        out.insert(o.name.clone(), Arc::new(text.lines().map(str::to_string).collect()));
    }
    Ok(out)
}

/// A cheap fingerprint of everything in a model folder (names, sizes, modification times), so poll
/// mode can tell which models changed.
pub fn fingerprint(dir: &Path) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    fn walk(dir: &Path, h: &mut impl Hasher, depth: usize) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        let mut entries: Vec<_> = rd.filter_map(|e| e.ok()).collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            e.file_name().hash(h);
            if let Ok(md) = e.metadata() {
                md.len().hash(h);
                if let Ok(t) = md.modified() {
                    t.hash(h);
                }
                if md.is_dir() && depth < 8 {
                    walk(&e.path(), h, depth + 1);
                }
            }
        }
    }
    walk(dir, &mut h, 0);
    h.finish()
}

#[cfg(test)]
mod tests;
