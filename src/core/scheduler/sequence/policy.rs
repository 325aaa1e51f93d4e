//! What `sequence_batching` configures, read and checked once at load time: the strategy, the control
//! inputs and the implicit state, and the tensors they become for one batch row.
//!
//! Error messages for configuration mistakes follow Triton's wording, so a model repository that Triton
//! refuses is refused here with the same reason.

use crate::error::{Error, Result};
use crate::model_api::types::{serialize_bytes, DataType, Tensor};
use crate::model_api::SequenceId;
pub use crate::model_config::{hidden_tensors, HiddenTensors};
use crate::proto::inference::model_config::SchedulingChoice;
use crate::proto::inference::model_sequence_batching::control::Kind;
use crate::proto::inference::model_sequence_batching::initial_state::StateData;
use crate::proto::inference::model_sequence_batching::{Control, StrategyChoice};
use crate::proto::inference::{ModelConfig, ModelSequenceBatching};
use bytes::Bytes;
use std::path::Path;
use std::time::Duration;

/// Triton's idle time for sequences whose configuration sets none (`max_sequence_idle_microseconds: 0`).
pub const DEFAULT_MAX_SEQUENCE_IDLE: Duration = Duration::from_secs(1);

/// The folder of a model that holds `initial_state { data_file: ... }` files, as in Triton.
pub const INITIAL_STATE_FOLDER: &str = "initial_state";

/// Which signal a control input carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControlKind {
    /// The row's request starts its sequence.
    Start,
    /// The row's request ends its sequence.
    End,
    /// The row holds a request (false for the padding rows of the direct strategy).
    Ready,
    /// The row's correlation id.
    Corrid,
}

impl ControlKind {
    /// The configuration name of the kind, for messages.
    pub fn config_name(self) -> &'static str {
        match self {
            ControlKind::Start => "CONTROL_SEQUENCE_START",
            ControlKind::End => "CONTROL_SEQUENCE_END",
            ControlKind::Ready => "CONTROL_SEQUENCE_READY",
            ControlKind::Corrid => "CONTROL_SEQUENCE_CORRID",
        }
    }
}

/// The false and true values of a boolean control, in the datatype the model reads.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum FlagValues {
    /// `int32_false_true`.
    Int32(i32, i32),
    /// `fp32_false_true`.
    Fp32(f32, f32),
    /// `bool_false_true`.
    Bool(bool, bool),
}

impl FlagValues {
    /// The datatype of the tensor.
    pub fn datatype(self) -> DataType {
        match self {
            FlagValues::Int32(..) => DataType::Int32,
            FlagValues::Fp32(..) => DataType::Fp32,
            FlagValues::Bool(..) => DataType::Bool,
        }
    }

    /// The element bytes for `value`.
    fn bytes(self, value: bool) -> Vec<u8> {
        match self {
            FlagValues::Int32(f, t) => (if value { t } else { f }).to_le_bytes().to_vec(),
            FlagValues::Fp32(f, t) => (if value { t } else { f }).to_le_bytes().to_vec(),
            FlagValues::Bool(f, t) => vec![u8::from(if value { t } else { f })],
        }
    }
}

/// One configured control input.
#[derive(Debug, Clone, PartialEq)]
pub struct ControlSpec {
    /// The model input that receives the control.
    pub name: String,
    /// What it signals.
    pub kind: ControlKind,
    /// For START, END and READY: how true and false are written.
    pub flag: Option<FlagValues>,
    /// The tensor's datatype (for CORRID, the configured `data_type`).
    pub datatype: DataType,
}

/// The state a sequence starts with (`initial_state`): its shape without the batch dimension and its bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct InitialState {
    /// Dimensions without the batch dimension, all known.
    pub dims: Vec<i64>,
    /// Row-major element bytes (BYTES elements length-prefixed).
    pub data: Bytes,
}

/// One implicit state tensor (`state [ ... ]`): the server feeds it to `input_name` and keeps what the model
/// writes to `output_name` for the sequence's next request.
#[derive(Debug, Clone, PartialEq)]
pub struct StateSpec {
    /// The model input that reads the state.
    pub input_name: String,
    /// The model output that writes the next state.
    pub output_name: String,
    /// The state's datatype (input and output).
    pub datatype: DataType,
    /// Dimensions without the batch dimension; `-1` for variable ones.
    pub dims: Vec<i64>,
    /// `initial_state`, when configured; otherwise a sequence starts from zeros.
    pub initial: Option<InitialState>,
}

/// How sequences share an instance's batch.
#[derive(Debug, Clone, PartialEq)]
pub enum Strategy {
    /// Each sequence owns a batch slot of one instance; a batch row is a slot.
    Direct {
        /// How long a batch may wait for more slots to fill (0: never waits).
        max_queue_delay: Duration,
        /// The fraction of slots that must be ready before a batch leaves without waiting.
        minimum_slot_utilization: f32,
    },
    /// Each instance holds candidate sequences whose oldest requests are batched dynamically, at most
    /// one request per sequence per batch.
    Oldest {
        /// Batch sizes that leave without waiting for the delay.
        preferred: Vec<u32>,
        /// How long a batch may wait to grow.
        max_queue_delay: Duration,
    },
}

/// Everything `sequence_batching` configures, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct SequencePolicy {
    /// The model's `max_batch_size`; 0 means tensors have no batch dimension.
    pub max_batch_size: u32,
    /// Sequences one instance serves at once: its batch slots (direct) or candidate sequences (oldest).
    pub slots_per_instance: usize,
    /// A sequence without requests for this long loses its slot.
    pub max_idle: Duration,
    /// Direct or oldest, with its delay settings.
    pub strategy: Strategy,
    /// Control inputs, in configuration order.
    pub controls: Vec<ControlSpec>,
    /// Implicit state tensors, in configuration order.
    pub states: Vec<StateSpec>,
    /// `iterative_sequence`: a request without a sequence id starts a sequence of its own (the batcher
    /// gives it an id), and the model may reschedule it (run it again) until it releases it, which ends
    /// the sequence.
    pub iterative: bool,
}

/// Per batch row, what the control inputs say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowSignals<'a> {
    /// The row holds a request.
    pub ready: bool,
    /// The request starts its sequence.
    pub start: bool,
    /// The request ends its sequence.
    pub end: bool,
    /// The row's sequence; `None` on padding rows (CORRID then reads 0 or "").
    pub corrid: Option<&'a SequenceId>,
}

impl SequencePolicy {
    /// Reads the `sequence_batching` of `cfg`; `None` when the model uses another scheduler.
    /// `model_dir` is the model's folder, where `initial_state/` files live.
    pub fn from_model(cfg: &ModelConfig, model_dir: &Path) -> Result<Option<SequencePolicy>> {
        match &cfg.scheduling_choice {
            Some(SchedulingChoice::SequenceBatching(s)) => SequencePolicy::from_config(cfg, s, model_dir).map(Some),
            _ => Ok(None),
        }
    }

    /// Reads and checks a `sequence_batching` section.
    pub fn from_config(cfg: &ModelConfig, s: &ModelSequenceBatching, model_dir: &Path) -> Result<SequencePolicy> {
        let model = &cfg.name;
        let max_batch_size = cfg.max_batch_size.max(0) as u32;
        let batch_slots = max_batch_size.max(1) as usize;
        let (strategy, slots_per_instance) = match &s.strategy_choice {
            None => (Strategy::Direct { max_queue_delay: Duration::ZERO, minimum_slot_utilization: 0.0 }, batch_slots),
            Some(StrategyChoice::Direct(d)) => (
                Strategy::Direct {
                    max_queue_delay: Duration::from_micros(d.max_queue_delay_microseconds),
                    minimum_slot_utilization: d.minimum_slot_utilization,
                },
                batch_slots,
            ),
            Some(StrategyChoice::Oldest(o)) => {
                let mut preferred: Vec<u32> =
                    o.preferred_batch_size.iter().filter(|&&b| b > 0).map(|&b| b as u32).collect();
                if let Some(&bad) = preferred.iter().find(|&&b| b > max_batch_size.max(1)) {
                    return Err(Error::invalid(format!(
                        "model '{model}': sequence_batching oldest preferred batch size {bad} must be <= \
                         max_batch_size {max_batch_size}"
                    )));
                }
                preferred.sort_unstable();
                preferred.dedup();
                // Triton's default: at least one candidate per batch slot.
                let candidates =
                    if o.max_candidate_sequences > 0 { o.max_candidate_sequences as usize } else { batch_slots };
                (
                    Strategy::Oldest {
                        preferred,
                        max_queue_delay: Duration::from_micros(o.max_queue_delay_microseconds),
                    },
                    candidates,
                )
            }
        };
        let max_idle = match s.max_sequence_idle_microseconds {
            0 => DEFAULT_MAX_SEQUENCE_IDLE,
            us => Duration::from_micros(us),
        };
        let controls = read_controls(model, s)?;
        let states = s.state.iter().map(|st| read_state(cfg, st, model_dir)).collect::<Result<Vec<_>>>()?;
        for (i, st) in states.iter().enumerate() {
            if states[..i].iter().any(|o| o.input_name == st.input_name) {
                return Err(Error::invalid(format!("State input name '{}' specified more than once.", st.input_name)));
            }
            if controls.iter().any(|c| c.name == st.input_name) || cfg.input.iter().any(|i| i.name == st.input_name) {
                return Err(Error::invalid(format!(
                    "model '{model}': state input '{}' is also a control input or a configured input; the server \
                     feeds it itself",
                    st.input_name
                )));
            }
        }
        for c in &controls {
            if cfg.input.iter().any(|i| i.name == c.name) {
                return Err(Error::invalid(format!(
                    "model '{model}': sequence batching control tensor '{}' is also declared in 'input'; the server \
                     feeds control tensors itself",
                    c.name
                )));
            }
        }
        let iterative = s.iterative_sequence;
        Ok(SequencePolicy { max_batch_size, slots_per_instance, max_idle, strategy, controls, states, iterative })
    }

    /// Whether tensors carry a batch dimension.
    pub fn batching(&self) -> bool {
        self.max_batch_size > 0
    }

    /// The CORRID control, if the model has one.
    pub fn corrid(&self) -> Option<&ControlSpec> {
        self.controls.iter().find(|c| c.kind == ControlKind::Corrid)
    }

    /// Refuses a sequence id the model's CORRID control cannot carry: a string id for a numeric CORRID.
    /// (Triton copies the string's bytes into the integer, which the model cannot make sense of.)
    pub fn check_corrid(&self, model: &str, id: &SequenceId) -> Result<()> {
        match (self.corrid(), id) {
            (Some(c), SequenceId::Str(s)) if c.datatype != DataType::Bytes => Err(Error::invalid(format!(
                "sequence id '{s}' is a string, but model '{model}' reads the correlation id from its {} control \
                 input '{}'; use an unsigned integer sequence id",
                c.datatype, c.name
            ))),
            _ => Ok(()),
        }
    }

    /// The control tensors of one batch row: shape `[1, 1]` when the model batches, else `[1]`.
    pub fn row_controls(&self, row: RowSignals<'_>) -> Vec<Tensor> {
        let shape = if self.batching() { vec![1, 1] } else { vec![1] };
        self.controls
            .iter()
            .map(|c| {
                let data: Vec<u8> = match (c.kind, c.flag) {
                    (ControlKind::Start, Some(f)) => f.bytes(row.start),
                    (ControlKind::End, Some(f)) => f.bytes(row.end),
                    (ControlKind::Ready, Some(f)) => f.bytes(row.ready),
                    (ControlKind::Corrid, _) => corrid_bytes(c.datatype, row.corrid),
                    // A boolean kind always has its values (checked when the policy was read).
                    (_, None) => Vec::new(),
                };
                Tensor::new(c.name.clone(), c.datatype, shape.clone(), data)
            })
            .collect()
    }
}

/// A correlation id as the CORRID datatype holds it. Integers are written like Triton does (the id's
/// little-endian bytes, cut to the width of the type); a string CORRID holds the id as text.
fn corrid_bytes(datatype: DataType, id: Option<&SequenceId>) -> Vec<u8> {
    let number = match id {
        Some(SequenceId::U64(v)) => *v,
        _ => 0,
    };
    match datatype {
        DataType::Bytes => {
            let text = match id {
                Some(SequenceId::U64(v)) => v.to_string(),
                Some(SequenceId::Str(s)) => s.clone(),
                None => String::new(),
            };
            serialize_bytes([text]).to_vec()
        }
        DataType::Uint32 | DataType::Int32 => (number as u32).to_le_bytes().to_vec(),
        _ => number.to_le_bytes().to_vec(),
    }
}

/// Reads `control_input`, with Triton's checks: one tensor per kind, one kind per tensor, exactly one
/// of the value lists (two entries) for boolean kinds, none and an integer or string datatype for CORRID.
fn read_controls(model: &str, s: &ModelSequenceBatching) -> Result<Vec<ControlSpec>> {
    let mut out: Vec<ControlSpec> = Vec::new();
    for ci in &s.control_input {
        if ci.name.is_empty() {
            return Err(Error::invalid(format!("sequence batching control tensor must have a name for {model}")));
        }
        if out.iter().any(|c| c.name == ci.name) {
            return Err(Error::invalid(format!(
                "sequence batching control tensor '{}' is specified for multiple control kinds for {model}",
                ci.name
            )));
        }
        if ci.control.len() > 1 {
            return Err(Error::invalid(format!(
                "sequence batching control tensor '{}' is specified for multiple control kinds for {model}",
                ci.name
            )));
        }
        for c in &ci.control {
            let kind = match Kind::try_from(c.kind) {
                Ok(Kind::ControlSequenceStart) => ControlKind::Start,
                Ok(Kind::ControlSequenceEnd) => ControlKind::End,
                Ok(Kind::ControlSequenceReady) => ControlKind::Ready,
                Ok(Kind::ControlSequenceCorrid) => ControlKind::Corrid,
                Err(_) => {
                    return Err(Error::invalid(format!(
                        "sequence batching control tensor '{}' has an unknown control kind {} for {model}",
                        ci.name, c.kind
                    )))
                }
            };
            if out.iter().any(|o| o.kind == kind) {
                return Err(Error::invalid(format!(
                    "sequence batching specifies multiple {} tensors for {model}",
                    kind.config_name()
                )));
            }
            let spec = if kind == ControlKind::Corrid {
                corrid_control(model, &ci.name, c)?
            } else {
                let flag = flag_values(model, kind, c)?;
                ControlSpec { name: ci.name.clone(), kind, flag: Some(flag), datatype: flag.datatype() }
            };
            out.push(spec);
        }
    }
    Ok(out)
}

fn flag_values(model: &str, kind: ControlKind, c: &Control) -> Result<FlagValues> {
    let k = kind.config_name();
    let lists = [!c.int32_false_true.is_empty(), !c.fp32_false_true.is_empty(), !c.bool_false_true.is_empty()];
    match lists.iter().filter(|&&b| b).count() {
        0 => {
            return Err(Error::invalid(format!(
                "sequence batching must specify either 'int32_false_true', 'fp32_false_true' or 'bool_false_true' \
                 for {k} for {model}"
            )))
        }
        1 => {}
        _ => {
            return Err(Error::invalid(format!(
                "sequence batching specifies more than one from 'int32_false_true', 'fp32_false_true' and \
                 'bool_false_true' for {k} for {model}"
            )))
        }
    }
    let two = |field: &str, n: usize| {
        if n == 2 {
            Ok(())
        } else {
            Err(Error::invalid(format!(
                "sequence batching control '{field}' must have exactly 2 entries for {k} for {model}"
            )))
        }
    };
    if let [f, t] = c.int32_false_true[..] {
        Ok(FlagValues::Int32(f, t))
    } else if let [f, t] = c.fp32_false_true[..] {
        Ok(FlagValues::Fp32(f, t))
    } else if let [f, t] = c.bool_false_true[..] {
        Ok(FlagValues::Bool(f, t))
    } else if !c.int32_false_true.is_empty() {
        two("int32_false_true", c.int32_false_true.len()).map(|_| FlagValues::Int32(0, 1))
    } else if !c.fp32_false_true.is_empty() {
        two("fp32_false_true", c.fp32_false_true.len()).map(|_| FlagValues::Fp32(0.0, 1.0))
    } else {
        two("bool_false_true", c.bool_false_true.len()).map(|_| FlagValues::Bool(false, true))
    }
}

fn corrid_control(model: &str, name: &str, c: &Control) -> Result<ControlSpec> {
    let k = ControlKind::Corrid.config_name();
    if !c.int32_false_true.is_empty() || !c.fp32_false_true.is_empty() || !c.bool_false_true.is_empty() {
        return Err(Error::invalid(format!(
            "sequence batching must not specify either 'int32_false_true', 'fp32_false_true' or 'bool_false_true' \
             for {k} for {model}"
        )));
    }
    let datatype = DataType::from_config(c.data_type)
        .filter(|d| {
            matches!(d, DataType::Uint64 | DataType::Int64 | DataType::Uint32 | DataType::Int32 | DataType::Bytes)
        })
        .ok_or_else(|| {
            Error::invalid(format!(
                "unexpected control data type, expected TYPE_UINT64, TYPE_INT64, TYPE_UINT32, TYPE_INT32, or \
                 TYPE_STRING for {k} for {model}"
            ))
        })?;
    Ok(ControlSpec { name: name.to_string(), kind: ControlKind::Corrid, flag: None, datatype })
}

/// Reads one `state` entry and its `initial_state`, with Triton's checks and messages.
fn read_state(
    cfg: &ModelConfig,
    st: &crate::proto::inference::model_sequence_batching::State,
    model_dir: &Path,
) -> Result<StateSpec> {
    let model = &cfg.name;
    if st.input_name.is_empty() || st.output_name.is_empty() {
        return Err(Error::invalid(format!(
            "model '{model}': every sequence_batching state needs both 'input_name' and 'output_name'"
        )));
    }
    let datatype = DataType::from_config(st.data_type)
        .ok_or_else(|| Error::invalid(format!("model '{model}': state '{}' has no valid data_type", st.input_name)))?;
    if let Some(d) = st.dims.iter().find(|&&d| d < -1 || d == 0) {
        return Err(Error::invalid(format!(
            "model '{model}': state '{}' has dimension {d}; dimensions must be >= 1, or -1 for a variable size",
            st.input_name
        )));
    }
    if st.dims.is_empty() && cfg.max_batch_size == 0 {
        return Err(Error::invalid(format!("model '{model}': state '{}' has no dims", st.input_name)));
    }
    let initial = match st.initial_state.as_slice() {
        [] => None,
        [init] => Some(read_initial_state(st, init, datatype, model_dir)?),
        many => {
            return Err(Error::invalid(format!(
                "initial_state field for state input '{}' must contain exactly one or zero element. Found '{}' \
                 elements.",
                st.input_name,
                many.len()
            )))
        }
    };
    Ok(StateSpec {
        input_name: st.input_name.clone(),
        output_name: st.output_name.clone(),
        datatype,
        dims: st.dims.clone(),
        initial,
    })
}

fn read_initial_state(
    st: &crate::proto::inference::model_sequence_batching::State,
    init: &crate::proto::inference::model_sequence_batching::InitialState,
    datatype: DataType,
    model_dir: &Path,
) -> Result<InitialState> {
    let input = &st.input_name;
    if init.data_type != st.data_type {
        return Err(Error::invalid(format!(
            "The data type used for 'initial_state' field of state '{input}' does not match the state data type."
        )));
    }
    if init.name.is_empty() {
        return Err(Error::invalid(format!(
            "Field 'name' must be set when using initial_state for state input '{input}'."
        )));
    }
    if init.dims.len() != st.dims.len() {
        return Err(Error::invalid(format!(
            "Number of dimensions in 'initial_state' doesn't match the size of 'state' dimensions for state input \
             '{input}'. {} != {}",
            init.dims.len(),
            st.dims.len()
        )));
    }
    for (&i, &s) in init.dims.iter().zip(&st.dims) {
        if i == -1 {
            return Err(Error::invalid(format!(
                "'initial_state' field for state input name '{input}' contains variable dimensions."
            )));
        }
        if i < 1 {
            return Err(Error::invalid(format!("'initial_state' dim for input name '{input}' must be >= 1, got {i}")));
        }
        if s != -1 && i != s {
            return Err(Error::invalid(format!(
                "'initial_state' dim for input name '{input}' doesn't match 'state' dim description. {i} != {s}"
            )));
        }
    }
    let count = crate::model_api::types::element_count(&init.dims)
        .ok_or_else(|| Error::invalid(format!("'initial_state' of state input '{input}' is too large")))?;
    let data = match &init.state_data {
        Some(StateData::ZeroData(_)) => match datatype.byte_size() {
            Some(size) => Bytes::from(vec![0u8; count.saturating_mul(size)]),
            // Zero BYTES elements are empty strings: a zero length prefix each.
            None => Bytes::from(vec![0u8; count.saturating_mul(4)]),
        },
        Some(StateData::DataFile(file)) => read_initial_file(input, file, datatype, count, model_dir)?,
        None => {
            return Err(Error::invalid(format!("initial_state setting expects state'{input}' to have state_data set")))
        }
    };
    Ok(InitialState { dims: init.dims.clone(), data })
}

/// Reads an `initial_state` data file from the model's `initial_state/` folder (Triton's place). A version
/// folder's `initial_state/` is tried too, since some repositories put it there.
fn read_initial_file(input: &str, file: &str, datatype: DataType, count: usize, model_dir: &Path) -> Result<Bytes> {
    use crate::core::repository::limits;
    use crate::model_config::paths;
    let field = "sequence_batching.state.initial_state.data_file";
    let primary = paths::confined(&model_dir.join(INITIAL_STATE_FOLDER), file, field)?;
    let path = if primary.is_file() {
        primary
    } else {
        let mut found = None;
        for v in crate::model_config::list_versions(model_dir).iter().rev() {
            let p = paths::confined(&model_dir.join(v.to_string()).join(INITIAL_STATE_FOLDER), file, field)?;
            if p.is_file() {
                found = Some(p);
                break;
            }
        }
        found.unwrap_or(primary)
    };
    let what = format!("initial_state data_file '{}' for state input '{input}'", paths::printable(file));
    // Only the bytes the dims need are read (the sizes were bounded when the configuration was checked);
    // a BYTES state's length is its own, up to the default tensor limit.
    let limit = match datatype.byte_size() {
        Some(size) => count.saturating_mul(size) as u64,
        None => limits::DEFAULT_MAX_TENSOR_BYTES as u64,
    };
    let bytes = limits::read_file_bounded(&path, limit, datatype.byte_size().is_some(), &what)?;
    match datatype.byte_size() {
        Some(size) => {
            let needed = count.saturating_mul(size);
            if bytes.len() < needed {
                return Err(Error::invalid(format!(
                    "initial_state setting expects {needed} bytes, but the data provided from {file} only has {} bytes.",
                    bytes.len()
                )));
            }
            // As in Triton, only the bytes the dims need are used.
            Ok(Bytes::from(bytes).slice(..needed))
        }
        None => {
            let n = crate::model_api::types::bytes_elements(&bytes)
                .map_err(|e| e.context(format!("initial_state data_file '{file}' of state input '{input}'")))?
                .len();
            if n != count {
                return Err(Error::invalid(format!(
                    "initial_state data_file '{file}' of state input '{input}' holds {n} BYTES elements but its dims \
                     need {count}"
                )));
            }
            Ok(Bytes::from(bytes))
        }
    }
}

impl StateSpec {
    /// The state tensor a sequence starts with, named as the model input and shaped for one batch row:
    /// `initial_state`, or zeros with every variable dimension 1 (Triton leaves that data uninitialized).
    pub fn initial_tensor(&self, batching: bool) -> Tensor {
        let (dims, data) = match &self.initial {
            Some(init) => (init.dims.clone(), init.data.clone()),
            None => {
                let dims: Vec<i64> = self.dims.iter().map(|&d| if d < 1 { 1 } else { d }).collect();
                let n = crate::model_api::types::element_count(&dims).unwrap_or(0);
                (dims, Bytes::from(vec![0u8; n.saturating_mul(self.datatype.byte_size().unwrap_or(4))]))
            }
        };
        let shape = if batching { std::iter::once(1).chain(dims).collect() } else { dims };
        Tensor::new(self.input_name.clone(), self.datatype, shape, data)
    }
}

/// A tensor of the same name, datatype and shape holding zeros (empty strings for BYTES), for the state of
/// padding rows, which must not touch any sequence's real state.
pub fn zeros_like(t: &Tensor) -> Tensor {
    let n = t.element_count();
    let size = t.datatype.byte_size().unwrap_or(4);
    Tensor::new(t.name.clone(), t.datatype, t.shape.clone(), Bytes::from(vec![0u8; n.saturating_mul(size)]))
}
