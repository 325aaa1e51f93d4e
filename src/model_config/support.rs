//! Which fields of `model_config.proto` tritonrs serves, and the load error for the ones it does not.
//!
//! tritonserver reads every field of a model's configuration; a field that tritonrs parsed but did not
//! act on would make a model behave differently without a word. So every field of every message in
//! `model_config.proto` is listed here as implemented, refused (the load fails with a reason naming the
//! field), or implemented elsewhere; a unit test walks the embedded descriptors so a field added to the
//! proto cannot go unlisted, and [`check`] walks a configuration and refuses the refused fields it sets.

use crate::error::{Error, Result};
use crate::proto::inference::ModelConfig;
use prost::Message;
use prost_reflect::{DynamicMessage, ReflectMessage, Value};

/// What tritonrs does with one field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Support {
    /// Read and acted on (or, for a message, its fields are listed on their own).
    Implemented,
    /// Not served: a configuration that sets it fails to load with this reason.
    Refused(&'static str),
    /// Ragged batching's `batch_input` / `batch_output` (`core::scheduler::batch`), listed apart because
    /// they cover whole messages.
    Ragged,
}

/// Fields tritonrs implements, by message (name without the `inference.` package).
const IMPLEMENTED: &[(&str, &[&str])] = &[
    (
        "ModelConfig",
        &[
            "name",
            "platform",
            "backend",
            "version_policy",
            "max_batch_size",
            "input",
            "output",
            "optimization",
            "dynamic_batching",
            "sequence_batching",
            "ensemble_scheduling",
            "instance_group",
            "default_model_filename",
            "parameters",
            "model_warmup",
            "model_operations",
            "model_transaction_policy",
            "model_repository_agents",
            "response_cache",
            "model_metrics",
        ],
    ),
    // `optimization.graph.level`: ONNX Runtime's graph optimization level; other backends refuse it
    // (check_graph_level).
    ("ModelOptimizationPolicy", &["graph"]),
    ("ModelOptimizationPolicy.Graph", &["level"]),
    // The first-response histogram's buckets (`core::lifecycle::state`); other families are refused
    // (check_model_metrics).
    ("ModelMetrics", &["metric_control"]),
    ("ModelMetrics.MetricControl", &["metric_identifier", "histogram_options"]),
    ("ModelMetrics.MetricControl.MetricIdentifier", &["family"]),
    ("ModelMetrics.MetricControl.HistogramOptions", &["buckets"]),
    ("ModelVersionPolicy", &["latest", "all", "specific"]),
    ("ModelVersionPolicy.Latest", &["num_versions"]),
    ("ModelVersionPolicy.Specific", &["versions"]),
    ("ModelInput", &["name", "data_type", "format", "dims", "reshape", "allow_ragged_batch", "optional"]),
    ("ModelOutput", &["name", "data_type", "dims", "reshape", "label_filename"]),
    ("ModelTensorReshape", &["shape"]),
    (
        "ModelInstanceGroup",
        &["name", "kind", "count", "rate_limiter", "gpus", "profile", "host_policy", "secondary_devices"],
    ),
    // Only TensorRT plans take a secondary device, one DLA core per group (see `check`).
    ("ModelInstanceGroup.SecondaryDevice", &["kind", "device_id"]),
    ("ModelRateLimiter", &["resources", "priority"]),
    ("ModelRateLimiter.Resource", &["name", "global", "count"]),
    // `cuda` only holds the fields below, each listed on its own; the pinned buffers are host
    // staging hints that tritonserver reports on (tritonrs hands backends the request's own memory).
    ("ModelOptimizationPolicy", &["cuda", "execution_accelerators", "input_pinned_memory", "output_pinned_memory"]),
    ("ModelOptimizationPolicy.PinnedMemoryBuffer", &["enable"]),
    ("ModelOptimizationPolicy.ExecutionAccelerators", &["gpu_execution_accelerator", "cpu_execution_accelerator"]),
    ("ModelOptimizationPolicy.ExecutionAccelerators.Accelerator", &["name", "parameters"]),
    (
        "ModelQueuePolicy",
        &["timeout_action", "default_timeout_microseconds", "allow_timeout_override", "max_queue_size"],
    ),
    (
        "ModelDynamicBatching",
        &[
            "preferred_batch_size",
            "max_queue_delay_microseconds",
            "preserve_ordering",
            "priority_levels",
            "default_priority_level",
            "default_queue_policy",
            "priority_queue_policy",
        ],
    ),
    (
        "ModelSequenceBatching",
        &["direct", "oldest", "max_sequence_idle_microseconds", "control_input", "state", "iterative_sequence"],
    ),
    ("ModelSequenceBatching.Control", &["kind", "int32_false_true", "fp32_false_true", "bool_false_true", "data_type"]),
    ("ModelSequenceBatching.ControlInput", &["name", "control"]),
    ("ModelSequenceBatching.InitialState", &["data_type", "dims", "zero_data", "data_file", "name"]),
    ("ModelSequenceBatching.State", &["input_name", "output_name", "data_type", "dims", "initial_state"]),
    ("ModelSequenceBatching.StrategyDirect", &["max_queue_delay_microseconds", "minimum_slot_utilization"]),
    (
        "ModelSequenceBatching.StrategyOldest",
        &["max_candidate_sequences", "preferred_batch_size", "max_queue_delay_microseconds", "preserve_ordering"],
    ),
    ("ModelEnsembling", &["step"]),
    ("ModelEnsembling.Step", &["model_name", "model_version", "input_map", "output_map"]),
    ("ModelParameter", &["string_value"]),
    ("ModelWarmup", &["name", "batch_size", "inputs", "count"]),
    ("ModelWarmup.Input", &["data_type", "dims", "zero_data", "random_data", "input_data_file"]),
    ("ModelOperations", &["op_library_filename"]),
    ("ModelTransactionPolicy", &["decoupled"]),
    ("ModelRepositoryAgents", &["agents"]),
    ("ModelRepositoryAgents.Agent", &["name", "parameters"]),
    ("ModelResponseCache", &["enable"]),
];

/// Fields tritonrs refuses, with the reason the load error gives.
const REFUSED: &[(&str, &str)] = &[
    (
        "ModelConfig.runtime",
        "tritonrs runs each backend in-process and loads no per-model runtime library (only \"model.py\", a \
         Python-based backend's, is served)",
    ),
    ("ModelConfig.cc_model_filenames", "tritonrs picks no model file by CUDA compute capability"),
    ("ModelConfig.metric_tags", "tritonrs adds no per-model metric labels"),
    ("ModelInput.is_shape_tensor", "tritonrs serves no shape tensors"),
    ("ModelInput.is_non_linear_format_io", "tritonrs serves no non-linear (vectorized) tensor formats"),
    ("ModelOutput.is_shape_tensor", "tritonrs serves no shape tensors"),
    ("ModelOutput.is_non_linear_format_io", "tritonrs serves no non-linear (vectorized) tensor formats"),
    ("ModelInstanceGroup.passive", "tritonrs schedules requests on every instance; it has no passive instances"),
    ("ModelOptimizationPolicy.priority", "tritonrs gives instances no execution priority"),
    ("ModelOptimizationPolicy.gather_kernel_buffer_threshold", "tritonrs gathers inputs without a GPU kernel"),
    ("ModelOptimizationPolicy.eager_batching", "tritonrs's rate limiter does not batch eagerly"),
    ("ModelOptimizationPolicy.Cuda.graphs", "tritonrs captures no CUDA graphs"),
    ("ModelOptimizationPolicy.Cuda.busy_wait_events", "tritonrs does not busy-wait on CUDA events"),
    ("ModelOptimizationPolicy.Cuda.graph_spec", "tritonrs captures no CUDA graphs"),
    ("ModelOptimizationPolicy.Cuda.output_copy_stream", "tritonrs copies outputs on no separate CUDA stream"),
    ("ModelOptimizationPolicy.Cuda.GraphSpec.batch_size", "tritonrs captures no CUDA graphs"),
    ("ModelOptimizationPolicy.Cuda.GraphSpec.input", "tritonrs captures no CUDA graphs"),
    ("ModelOptimizationPolicy.Cuda.GraphSpec.graph_lower_bound", "tritonrs captures no CUDA graphs"),
    ("ModelOptimizationPolicy.Cuda.GraphSpec.Shape.dim", "tritonrs captures no CUDA graphs"),
    ("ModelOptimizationPolicy.Cuda.GraphSpec.LowerBound.batch_size", "tritonrs captures no CUDA graphs"),
    ("ModelOptimizationPolicy.Cuda.GraphSpec.LowerBound.input", "tritonrs captures no CUDA graphs"),
    (
        "ModelSequenceBatching.State.use_same_buffer_for_input_output",
        "tritonrs copies implicit state between requests and shares no buffer with the backend",
    ),
    ("ModelSequenceBatching.State.use_growable_memory", "tritonrs gives implicit state no growable memory"),
    (
        "ModelEnsembling.max_inflight_responses",
        "tritonrs's ensembles do not limit the responses in flight between steps",
    ),
    ("ModelEnsembling.Step.model_namespace", "tritonrs resolves ensemble steps by model name only"),
];

/// The fields of ragged batching (`core::scheduler::batch` computes them; `validate_batch_io` checks them).
const RAGGED: &[&str] = &["ModelConfig.batch_input", "ModelConfig.batch_output", "BatchInput.", "BatchOutput."];

/// What tritonrs does with field `field` of message `message` (names without the `inference.`
/// package, nested messages as `Outer.Inner`); `None` for a field this table does not know.
pub fn support(message: &str, field: &str) -> Option<Support> {
    let full = format!("{message}.{field}");
    if RAGGED.iter().any(|r| if r.ends_with('.') { full.starts_with(r) } else { full == *r }) {
        return Some(Support::Ragged);
    }
    if let Some((_, reason)) = REFUSED.iter().find(|(f, _)| *f == full) {
        return Some(Support::Refused(reason));
    }
    IMPLEMENTED.iter().any(|(m, fields)| *m == message && fields.contains(&field)).then_some(Support::Implemented)
}

/// Refuses a configuration that sets a field tritonrs does not serve, naming the field (its path from
/// the configuration, e.g. `instance_group.passive`) and why.
pub fn check(cfg: &ModelConfig) -> Result<()> {
    let desc = crate::proto::model_config_descriptor();
    // The one `runtime` served: a Python-based backend's `model.py`.
    let encoded = if cfg.runtime == super::PYTHON_RUNTIME {
        ModelConfig { runtime: String::new(), ..cfg.clone() }.encode_to_vec()
    } else {
        cfg.encode_to_vec()
    };
    let message = DynamicMessage::decode(desc, encoded.as_slice())
        .map_err(|e| Error::internal(format!("model '{}': its configuration does not re-encode: {e}", cfg.name)))?;
    walk(&message, "").map_err(|(path, reason)| {
        Error::invalid(format!("model '{}': field '{path}' is not supported: {reason}; remove it", cfg.name))
    })?;
    check_secondary_devices(cfg)?;
    check_graph_level(cfg)?;
    check_model_metrics(cfg)
}

/// `optimization.graph.level` is ONNX Runtime's graph optimization level; no other backend here has one.
fn check_graph_level(cfg: &ModelConfig) -> Result<()> {
    let set = cfg.optimization.as_ref().and_then(|o| o.graph.as_ref()).is_some_and(|g| g.level != 0);
    if set && cfg.backend != "onnxruntime" {
        return Err(Error::invalid(format!(
            "model '{}': field 'optimization.graph.level' is not supported: the {} backend has no graph \
             optimization level (only onnxruntime models read it); remove it",
            cfg.name, cfg.backend
        )));
    }
    Ok(())
}

/// `model_metrics`: only the first-response histogram's buckets can be overridden (as in tritonserver,
/// whose only histogram family it is), with at least one bucket bound.
fn check_model_metrics(cfg: &ModelConfig) -> Result<()> {
    use crate::proto::inference::model_metrics::metric_control::MetricOptions;
    let family = crate::metrics_text::names::FIRST_RESPONSE_HISTOGRAM.name;
    for c in cfg.model_metrics.iter().flat_map(|m| &m.metric_control) {
        let bad =
            |why: String| Error::invalid(format!("model '{}': field 'model_metrics.metric_control': {why}", cfg.name));
        let named = c.metric_identifier.as_ref().map(|i| i.family.as_str()).unwrap_or_default();
        if named != family {
            return Err(bad(format!("the metric family '{named}' has no options to set; only '{family}' has")));
        }
        match &c.metric_options {
            Some(MetricOptions::HistogramOptions(h))
                if !h.buckets.is_empty() && h.buckets.iter().all(|b| b.is_finite()) => {}
            _ => return Err(bad(format!("'{family}' needs histogram_options with finite buckets"))),
        }
    }
    Ok(())
}

/// `secondary_devices`: a TensorRT plan's runtime takes one DLA core (`KIND_NVDLA`); other backends
/// place nothing on a secondary device.
fn check_secondary_devices(cfg: &ModelConfig) -> Result<()> {
    use crate::proto::inference::model_instance_group::secondary_device::SecondaryDeviceKind;
    for g in cfg.instance_group.iter().filter(|g| !g.secondary_devices.is_empty()) {
        let bad = |why: String| {
            Error::invalid(format!(
                "model '{}': field 'instance_group.secondary_devices' of group '{}': {why}",
                cfg.name, g.name
            ))
        };
        if cfg.backend != "tensorrt" {
            return Err(bad(format!(
                "the {} backend places no instance on a secondary device; only TensorRT plans run on a DLA",
                cfg.backend
            )));
        }
        if g.secondary_devices.len() > 1 {
            return Err(bad("a TensorRT runtime uses one DLA core; name one secondary device".into()));
        }
        for d in &g.secondary_devices {
            if d.kind != SecondaryDeviceKind::KindNvdla as i32 {
                return Err(bad("only KIND_NVDLA secondary devices exist for TensorRT".into()));
            }
            if !(0..=i64::from(i32::MAX)).contains(&d.device_id) {
                return Err(bad(format!("DLA core {} is not a core number", d.device_id)));
            }
        }
    }
    Ok(())
}

/// The message name without the package, as the tables spell it.
fn short_name(message: &DynamicMessage) -> String {
    let d = message.descriptor();
    let full = d.full_name();
    full.strip_prefix(&format!("{}.", d.package_name())).unwrap_or(full).to_string()
}

/// Finds the first refused field set in `message` (at `prefix`), with its path and the reason.
fn walk(message: &DynamicMessage, prefix: &str) -> std::result::Result<(), (String, &'static str)> {
    let name = short_name(message);
    for (field, value) in message.fields() {
        let path = if prefix.is_empty() { field.name().to_string() } else { format!("{prefix}.{}", field.name()) };
        // An empty sub-message (`cuda {}`) sets nothing.
        if let Value::Message(m) = value {
            if m.encoded_len() == 0 {
                continue;
            }
        }
        if let Some(Support::Refused(reason)) = support(&name, field.name()) {
            return Err((path, reason));
        }
        walk_value(value, &path)?;
    }
    Ok(())
}

fn walk_value(value: &Value, path: &str) -> std::result::Result<(), (String, &'static str)> {
    match value {
        Value::Message(m) => walk(m, path),
        Value::List(items) => items.iter().try_for_each(|v| walk_value(v, path)),
        Value::Map(entries) => entries.values().try_for_each(|v| walk_value(v, path)),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests;
