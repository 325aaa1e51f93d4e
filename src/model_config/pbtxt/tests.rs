use serde_json::json;

use super::*;
use crate::proto::inference::model_config::SchedulingChoice;
use crate::proto::inference::model_ensembling::Step;
use crate::proto::inference::model_input::Format;
use crate::proto::inference::model_instance_group::Kind as InstanceKind;
use crate::proto::inference::model_sequence_batching::control::Kind as ControlKind;
use crate::proto::inference::model_sequence_batching::initial_state::StateData;
use crate::proto::inference::model_sequence_batching::StrategyChoice;
use crate::proto::inference::model_version_policy::PolicyChoice;
use crate::proto::inference::model_warmup::input::InputDataType;
use crate::proto::inference::{DataType, ModelInput, ModelParameter, ModelTensorReshape};

const FILE: &str = "models/m/config.pbtxt";

/// Triton's `simple` example model, verbatim layout.
const SIMPLE: &str = r#"
name: "simple"
platform: "tensorflow_graphdef"
max_batch_size: 8
input [
  {
    name: "INPUT0"
    data_type: TYPE_INT32
    dims: [ 16 ]
  },
  {
    name: "INPUT1"
    data_type: TYPE_INT32
    dims: [ 16 ]
  }
]
output [
  {
    name: "OUTPUT0"
    data_type: TYPE_INT32
    dims: [ 16 ]
  },
  {
    name: "OUTPUT1"
    data_type: TYPE_INT32
    dims: [ 16 ]
  }
]
"#;

const SEQUENCE: &str = r#"
name: "simple_sequence"
backend: "onnxruntime"
max_batch_size: 8
sequence_batching {
  max_sequence_idle_microseconds: 5000000
  oldest { max_candidate_sequences: 4 preferred_batch_size: [ 2, 4 ] }
  control_input [
    {
      name: "START"
      control [ { kind: CONTROL_SEQUENCE_START fp32_false_true: [ 0, 1 ] } ]
    },
    {
      name: "READY"
      control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ]
    },
    {
      name: "CORRID"
      control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ]
    }
  ]
  state [
    {
      input_name: "INPUT_STATE"
      output_name: "OUTPUT_STATE"
      data_type: TYPE_INT32
      dims: [ 1 ]
      initial_state: { data_type: TYPE_INT32 dims: [ 1 ] zero_data: true name: "init" }
    }
  ]
}
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
"#;

const ENSEMBLE: &str = r#"
name: "ensemble"
platform: "ensemble"
max_batch_size: 1
input [ { name: "IMAGE" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "CLASSIFICATION" data_type: TYPE_FP32 dims: [ 1000 ] } ]
ensemble_scheduling {
  step [
    {
      model_name: "preprocess"
      model_version: -1
      input_map { key: "RAW" value: "IMAGE" }
      output_map { key: "PREPROCESSED" value: "preprocessed_image" }
    },
    {
      model_name: "classifier"
      model_version: 3
      input_map [ { key: "INPUT" value: "preprocessed_image" } ]
      output_map: { key: "OUTPUT" value: "CLASSIFICATION" }
    }
  ]
}
"#;

const KITCHEN_SINK: &str = r#"
# A config exercising most of the schema.
name: "resnet"   # trailing comment with "quotes" and [brackets] and {braces}
backend: "onnxruntime"
default_model_filename: "model#1.onnx"
max_batch_size: 16
version_policy { latest { num_versions: 2 } }
input [
  {
    name: "data"
    data_type: TYPE_FP32
    format: FORMAT_NCHW
    dims: [ 3, 224, 224 ]
    reshape: { shape: [ ] }
    optional: true
    allow_ragged_batch: false
  }
]
output [
  {
    name: "probs"
    data_type: TYPE_FP32
    dims: [ -1 ]
    label_filename: "labels[1].txt"
  }
]
instance_group [ { count: 2 kind: KIND_CPU }, { count: 1 kind: KIND_GPU gpus: [ 0, 1 ] } ]
dynamic_batching {
  preferred_batch_size: [ 4, 8 ]
  max_queue_delay_microseconds: 100
  priority_levels: 2
  default_priority_level: 1
  default_queue_policy { timeout_action: DELAY default_timeout_microseconds: 1000 }
  priority_queue_policy { key: 1 value: { max_queue_size: 8 allow_timeout_override: true } }
}
optimization {
  priority: PRIORITY_MAX
  input_pinned_memory { enable: true }
  execution_accelerators {
    gpu_execution_accelerator : [ {
      name : "tensorrt"
      parameters { key: "precision_mode" value: "FP16" }
      parameters { key: "max_workspace_size_bytes" value: "1073741824" }
    } ]
  }
  cuda { graphs: true graph_spec [ { batch_size: 4 input { key: "data" value { dim: [ 3, 224, 224 ] } } } ] }
}
parameters { key: "intra_op_thread_count" value: { string_value: "1" } }
parameters: [ { key: "inter_op_thread_count", value: { string_value: "2" } } ]
model_warmup [
  {
    name: "zeros"
    batch_size: 1
    count: 2
    inputs { key: "data" value: { data_type: TYPE_FP32 dims: [ 3, 224, 224 ] zero_data: true } }
  },
  {
    name: "from_file"
    batch_size: 1
    inputs [ { key: "data", value { data_type: TYPE_FP32, dims: 3, dims: 224, dims: 224; input_data_file: "raw.bin" } } ]
  }
]
model_transaction_policy { decoupled: True }
response_cache { enable: true }
metric_tags { key: "team" value: "vision" }
model_repository_agents { agents [ { name: "checksum" parameters { key: "MD5:model.onnx" value: "abc" } } ] }
model_operations { op_library_filename: [ "libcustom.so" ] }
"#;

fn parse(text: &str) -> ModelConfig {
    match parse_config(text, FILE) {
        Ok(cfg) => cfg,
        Err(err) => panic!("config should parse, got: {err}"),
    }
}

fn parse_err(text: &str) -> ConfigError {
    match parse_config(text, FILE) {
        Ok(cfg) => panic!("config should not parse, got: {cfg:?}"),
        Err(err) => err,
    }
}

// ---------------------------------------------------------------------------------------------
// Parsing valid configs
// ---------------------------------------------------------------------------------------------

#[test]
fn parses_triton_simple_example() {
    let cfg = parse(SIMPLE);
    assert_eq!(cfg.name, "simple");
    assert_eq!(cfg.platform, "tensorflow_graphdef");
    assert_eq!(cfg.max_batch_size, 8);
    assert_eq!(cfg.input.len(), 2);
    assert_eq!(cfg.output.len(), 2);
    assert_eq!(cfg.input[0].name, "INPUT0");
    assert_eq!(cfg.input[1].name, "INPUT1");
    assert_eq!(cfg.input[0].data_type(), DataType::TypeInt32);
    assert_eq!(cfg.input[0].dims, vec![16]);
    assert_eq!(cfg.output[1].name, "OUTPUT1");
    assert_eq!(cfg.output[1].dims, vec![16]);
    assert!(cfg.scheduling_choice.is_none());
    assert!(cfg.version_policy.is_none());
}

#[test]
fn scalar_list_forms() {
    let cfg = parse(
        r#"
        input { name: "a" dims: [8,16,32] }
        input { name: "b" dims: 4 }
        input { name: "c" dims: 1 dims: 2 dims: [3, 4] }
        input { name: "d" dims: [] }
        input { name: "e" dims [ -1, 0x10 ] }
        "#,
    );
    let dims: Vec<Vec<i64>> = cfg.input.iter().map(|i| i.dims.clone()).collect();
    assert_eq!(dims, vec![vec![8, 16, 32], vec![4], vec![1, 2, 3, 4], vec![], vec![-1, 16]]);
}

#[test]
fn message_list_forms() {
    let spaced = parse(r#"input [ { name: "x" }, { name: "y" } ]"#);
    let tight = parse(r#"input[{name:"x"},{name:"y"}]"#);
    let colon = parse(r#"input: [ { name: "x" }, { name: "y" } ]"#);
    let repeated = parse(r#"input{name:"x"} input { name: "y" }"#);
    let colon_brace = parse(r#"input: { name: "x" } input: { name: "y" }"#);
    let angle = parse(r#"input < name: "x" > input: < name: "y" >"#);
    let newline = parse("input\n[\n{ name: \"x\" }\n,\n{ name: \"y\" }\n]\n");
    let commented = parse("input # the inputs [\n[ { name: \"x\" }, { name: \"y\" } ]");
    for cfg in [&tight, &colon, &repeated, &colon_brace, &angle, &newline, &commented] {
        assert_eq!(cfg, &spaced);
    }
    let names: Vec<&str> = spaced.input.iter().map(|i| i.name.as_str()).collect();
    assert_eq!(names, ["x", "y"]);
}

#[test]
fn nested_colonless_lists_and_separators() {
    let cfg = parse(
        r#"output[{name:"o";dims[1,2],reshape{shape[2]}}], max_batch_size: 4; instance_group[{kind:KIND_MODEL}]"#,
    );
    assert_eq!(cfg.output[0].name, "o");
    assert_eq!(cfg.output[0].dims, vec![1, 2]);
    assert_eq!(cfg.output[0].reshape, Some(ModelTensorReshape { shape: vec![2] }));
    assert_eq!(cfg.max_batch_size, 4);
    assert_eq!(cfg.instance_group[0].kind(), InstanceKind::Model);
}

#[test]
fn instance_groups() {
    let cfg = parse("instance_group [ { count: 2 kind: KIND_CPU } ]");
    assert_eq!(cfg.instance_group.len(), 1);
    assert_eq!(cfg.instance_group[0].count, 2);
    assert_eq!(cfg.instance_group[0].kind(), InstanceKind::Cpu);

    let cfg = parse(KITCHEN_SINK);
    assert_eq!(cfg.instance_group.len(), 2);
    assert_eq!(cfg.instance_group[1].kind(), InstanceKind::Gpu);
    assert_eq!(cfg.instance_group[1].gpus, vec![0, 1]);
}

#[test]
fn parameter_map_forms() {
    let expected = |value: &str| ModelParameter { string_value: value.to_owned() };
    let block = parse(r#"parameters { key: "intra_op_thread_count" value: { string_value: "1" } }"#);
    let list = parse(r#"parameters: [{ key: "intra_op_thread_count", value: { string_value: "1" }}]"#);
    let colonless = parse(r#"parameters [ { key: "intra_op_thread_count" value { string_value: "1" } } ]"#);
    for cfg in [&block, &list, &colonless] {
        assert_eq!(cfg.parameters.len(), 1);
        assert_eq!(cfg.parameters.get("intra_op_thread_count"), Some(&expected("1")));
    }

    let cfg = parse(KITCHEN_SINK);
    assert_eq!(cfg.parameters.len(), 2);
    assert_eq!(cfg.parameters.get("inter_op_thread_count"), Some(&expected("2")));
    assert_eq!(cfg.metric_tags.get("team").map(String::as_str), Some("vision"));
}

#[test]
fn comments_and_string_contents() {
    let cfg = parse(
        r##"
        # leading comment with an apostrophe: don't, and a bracket [
        name: "a#b" # the '#' inside the string is not a comment
        platform: 'single [quoted] #'
        backend: "esc\"aped # [ \\"
        default_model_filename: 'it\'s'
        runtime: "con" "cat" # adjacent strings concatenate
        output [ { name: "o" label_filename: "labels[0].txt" } ] # trailing
        "##,
    );
    assert_eq!(cfg.name, "a#b");
    assert_eq!(cfg.platform, "single [quoted] #");
    assert_eq!(cfg.backend, "esc\"aped # [ \\");
    assert_eq!(cfg.default_model_filename, "it's");
    assert_eq!(cfg.runtime, "concat");
    assert_eq!(cfg.output[0].label_filename, "labels[0].txt");
}

#[test]
fn comment_at_end_without_newline() {
    let cfg = parse("max_batch_size: 2 # no newline after this");
    assert_eq!(cfg.max_batch_size, 2);
}

#[test]
fn enums_by_name_and_number() {
    let cfg = parse(
        r#"input { data_type: TYPE_FP16 format: FORMAT_NHWC } input { data_type: 8 }
           optimization { priority: PRIORITY_MIN }"#,
    );
    assert_eq!(cfg.input[0].data_type(), DataType::TypeFp16);
    assert_eq!(cfg.input[0].format(), Format::Nhwc);
    assert_eq!(cfg.input[1].data_type(), DataType::TypeInt32);
}

#[test]
fn version_policies() {
    let specific = parse("version_policy: { specific: { versions: [1, 3] } }");
    assert_eq!(
        specific.version_policy.and_then(|p| p.policy_choice),
        Some(PolicyChoice::Specific(crate::proto::inference::model_version_policy::Specific { versions: vec![1, 3] }))
    );

    let latest = parse("version_policy { latest { num_versions: 2 } }");
    assert_eq!(
        latest.version_policy.and_then(|p| p.policy_choice),
        Some(PolicyChoice::Latest(crate::proto::inference::model_version_policy::Latest { num_versions: 2 }))
    );

    let all = parse("version_policy: { all { } }");
    assert!(matches!(all.version_policy.and_then(|p| p.policy_choice), Some(PolicyChoice::All(_))));
}

#[test]
fn dynamic_batching() {
    let cfg = parse("dynamic_batching { preferred_batch_size: [ 4, 8 ] max_queue_delay_microseconds: 100 }");
    let Some(SchedulingChoice::DynamicBatching(batching)) = cfg.scheduling_choice else {
        panic!("expected dynamic batching");
    };
    assert_eq!(batching.preferred_batch_size, vec![4, 8]);
    assert_eq!(batching.max_queue_delay_microseconds, 100);

    let empty = parse("dynamic_batching { }");
    assert!(matches!(empty.scheduling_choice, Some(SchedulingChoice::DynamicBatching(_))));

    let cfg = parse(KITCHEN_SINK);
    let Some(SchedulingChoice::DynamicBatching(batching)) = cfg.scheduling_choice else {
        panic!("expected dynamic batching");
    };
    let policy = batching.priority_queue_policy.get(&1);
    assert_eq!(policy.map(|p| p.max_queue_size), Some(8));
    assert_eq!(batching.default_queue_policy.map(|p| p.default_timeout_microseconds), Some(1000));
}

#[test]
fn sequence_batching() {
    let cfg = parse(SEQUENCE);
    let Some(SchedulingChoice::SequenceBatching(sequence)) = cfg.scheduling_choice else {
        panic!("expected sequence batching");
    };
    assert_eq!(sequence.max_sequence_idle_microseconds, 5_000_000);
    assert_eq!(sequence.control_input.len(), 3);
    let start = &sequence.control_input[0];
    assert_eq!(start.name, "START");
    assert_eq!(start.control[0].kind(), ControlKind::ControlSequenceStart);
    assert_eq!(start.control[0].fp32_false_true, vec![0.0, 1.0]);
    let corrid = &sequence.control_input[2].control[0];
    assert_eq!(corrid.kind(), ControlKind::ControlSequenceCorrid);
    assert_eq!(corrid.data_type(), DataType::TypeUint64);
    let Some(StrategyChoice::Oldest(oldest)) = &sequence.strategy_choice else {
        panic!("expected the oldest strategy");
    };
    assert_eq!(oldest.max_candidate_sequences, 4);
    assert_eq!(oldest.preferred_batch_size, vec![2, 4]);
    let initial = &sequence.state[0].initial_state[0];
    assert_eq!(initial.state_data, Some(StateData::ZeroData(true)));
    assert_eq!(initial.name, "init");
}

#[test]
fn ensemble_scheduling() {
    let cfg = parse(ENSEMBLE);
    let Some(SchedulingChoice::EnsembleScheduling(ensemble)) = cfg.scheduling_choice else {
        panic!("expected ensemble scheduling");
    };
    let steps: Vec<&Step> = ensemble.step.iter().collect();
    assert_eq!(steps.len(), 2);
    assert_eq!(steps[0].model_name, "preprocess");
    assert_eq!(steps[0].model_version, -1);
    assert_eq!(steps[0].input_map.get("RAW").map(String::as_str), Some("IMAGE"));
    assert_eq!(steps[0].output_map.get("PREPROCESSED").map(String::as_str), Some("preprocessed_image"));
    assert_eq!(steps[1].model_version, 3);
    assert_eq!(steps[1].input_map.get("INPUT").map(String::as_str), Some("preprocessed_image"));
    assert_eq!(steps[1].output_map.get("OUTPUT").map(String::as_str), Some("CLASSIFICATION"));
}

#[test]
fn tensor_details() {
    let cfg = parse(KITCHEN_SINK);
    let input = &cfg.input[0];
    assert_eq!(input.format(), Format::Nchw);
    assert_eq!(input.dims, vec![3, 224, 224]);
    assert_eq!(input.reshape, Some(ModelTensorReshape { shape: vec![] }));
    assert!(input.optional);
    assert_eq!(cfg.output[0].dims, vec![-1]);
    assert_eq!(cfg.output[0].label_filename, "labels[1].txt");
    assert_eq!(cfg.default_model_filename, "model#1.onnx");
}

#[test]
fn model_warmup() {
    let cfg = parse(KITCHEN_SINK);
    assert_eq!(cfg.model_warmup.len(), 2);
    let zeros = &cfg.model_warmup[0];
    assert_eq!((zeros.name.as_str(), zeros.batch_size, zeros.count), ("zeros", 1, 2));
    let data = &zeros.inputs["data"];
    assert_eq!(data.data_type(), DataType::TypeFp32);
    assert_eq!(data.dims, vec![3, 224, 224]);
    assert_eq!(data.input_data_type, Some(InputDataType::ZeroData(true)));
    let from_file = &cfg.model_warmup[1].inputs["data"];
    assert_eq!(from_file.dims, vec![3, 224, 224]);
    assert_eq!(from_file.input_data_type, Some(InputDataType::InputDataFile("raw.bin".to_owned())));
}

#[test]
fn miscellaneous_sections() {
    let cfg = parse(KITCHEN_SINK);
    assert_eq!(cfg.model_transaction_policy.map(|p| p.decoupled), Some(true));
    assert_eq!(cfg.response_cache.map(|c| c.enable), Some(true));
    let optimization = cfg.optimization.unwrap_or_default();
    let accelerators = optimization.execution_accelerators.unwrap_or_default();
    let tensorrt = &accelerators.gpu_execution_accelerator[0];
    assert_eq!(tensorrt.name, "tensorrt");
    assert_eq!(tensorrt.parameters.get("precision_mode").map(String::as_str), Some("FP16"));
    let graph = &optimization.cuda.unwrap_or_default().graph_spec[0];
    assert_eq!(graph.input["data"].dim, vec![3, 224, 224]);
    assert_eq!(cfg.model_operations.map(|o| o.op_library_filename), Some(vec!["libcustom.so".to_owned()]));
}

#[test]
fn empty_and_comment_only_configs_are_default() {
    assert_eq!(parse(""), ModelConfig::default());
    assert_eq!(parse("  \n# nothing here\n"), ModelConfig::default());
}

#[test]
fn byte_order_mark_is_ignored() {
    assert_eq!(parse("\u{feff}max_batch_size: 3").max_batch_size, 3);
    let err = parse_err("\u{feff}max_batch_sizee: 3");
    assert_eq!((err.line, err.column), (1, 1));
}

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

#[test]
fn unknown_field_display() {
    let text = format!("{}    max_batch_sizee: 8\n", "\n".repeat(11));
    let err = match parse_config(&text, "models/simple/config.pbtxt") {
        Ok(_) => panic!("unknown field accepted"),
        Err(err) => err,
    };
    assert_eq!(
        err.to_string(),
        "models/simple/config.pbtxt:12:5: field 'max_batch_sizee': no such field in \
         inference.ModelConfig; did you mean 'max_batch_size'?"
    );
    assert_eq!(
        err,
        ConfigError {
            file: "models/simple/config.pbtxt".to_owned(),
            line: 12,
            column: 5,
            field: Some("max_batch_sizee".to_owned()),
            message: "no such field in inference.ModelConfig; did you mean 'max_batch_size'?".to_owned(),
        }
    );
}

#[test]
fn unknown_field_after_inserted_colons_on_same_line() {
    // Two colons get inserted before the bad field (after `input` and `dims`).
    let text = "name: \"m\"\ninput [ { dims [ 1 ] name: \"x\" dimz: [ 2 ] } ]\n";
    let err = parse_err(text);
    assert_eq!(err.field.as_deref(), Some("dimz"));
    let column = text.lines().nth(1).and_then(|l| l.find("dimz")).map(|c| c + 1);
    assert_eq!((err.line, Some(err.column)), (2, column.map(|c| c as u32)));
    assert_eq!(err.message, "no such field in inference.ModelInput; did you mean 'dims'?");
}

#[test]
fn unknown_nested_field_in_multiline_config() {
    let text = SIMPLE.replace(
        "    dims: [ 16 ]\n  },\n  {\n    name: \"INPUT1\"",
        "    dims: [ 16 ]\n  },\n  {\n    nme: \"INPUT1\"",
    );
    let err = parse_err(&text);
    assert_eq!((err.line, err.column), (12, 5));
    assert_eq!(err.field.as_deref(), Some("nme"));
    assert!(err.message.contains("did you mean 'name'"), "{err}");
}

#[test]
fn unknown_field_followed_by_colonless_list() {
    let err = parse_err("max_batch_size: 1\n  inputs [ { name: \"x\" } ]");
    assert_eq!((err.line, err.column), (2, 3));
    assert_eq!(err.field.as_deref(), Some("inputs"));
    assert_eq!(err.message, "no such field in inference.ModelConfig; did you mean 'input'?");
}

#[test]
fn unknown_field_without_suggestion() {
    let err = parse_err("input [ { completely_unrelated: 1 } ]");
    assert_eq!(err.message, "no such field in inference.ModelInput");
    assert_eq!((err.line, err.column), (1, 11));
}

#[test]
fn bad_enum_value() {
    let err = parse_err("input [\n  { name: \"x\" data_type: TYPE_INT33 }\n]");
    assert_eq!((err.line, err.column), (2, 26));
    assert_eq!(err.field.as_deref(), Some("data_type"));
    assert_eq!(
        err.message,
        "value 'TYPE_INT33' was not found for enum 'inference.DataType'; did you mean 'TYPE_INT32'?"
    );

    let err = parse_err("instance_group [ { kind: KIND_TPU } ]");
    assert_eq!(err.field.as_deref(), Some("kind"));
    assert!(err.message.starts_with("value 'KIND_TPU' was not found"), "{err}");
}

#[test]
fn enum_suggestions_count_a_swap_as_one_typo_and_ties_suggest_nothing() {
    // TYPE_INT23 is one transposition from TYPE_INT32 and two edits from TYPE_INT8.
    let err = parse_err("input [ { name: \"x\" data_type: TYPE_INT23 } ]");
    assert!(err.message.ends_with("did you mean 'TYPE_INT32'?"), "{err}");
    // KIND_TPU is one edit from both KIND_GPU and KIND_CPU: no guess.
    let err = parse_err("instance_group [ { kind: KIND_TPU } ]");
    assert!(!err.message.contains("did you mean"), "{err}");
    assert_eq!(edit_distance("ab", "ba"), 1);
    assert_eq!(edit_distance("TYPE_INT23", "TYPE_INT8"), 2);
    assert_eq!(edit_distance("kitten", "sitting"), 3);
}

#[test]
fn string_where_integer_expected() {
    let err = parse_err("name: \"m\"\nmax_batch_size: \"8\"\n");
    assert_eq!((err.line, err.column), (2, 17));
    assert_eq!(err.field.as_deref(), Some("max_batch_size"));
    assert_eq!(
        err.to_string(),
        "models/m/config.pbtxt:2:17: field 'max_batch_size': expected an integer, but found '\"8\"'"
    );
}

#[test]
fn bad_value_inside_list_names_the_list_field() {
    let err = parse_err("input [ { dims: [ 1, x ] } ]");
    assert_eq!(err.field.as_deref(), Some("dims"));
    assert_eq!((err.line, err.column), (1, 22));
}

#[test]
fn unterminated_brace() {
    let err = parse_err("name: \"m\"\ninstance_group {\n  count: 1\n");
    assert_eq!((err.line, err.column), (2, 16));
    assert_eq!(err.field.as_deref(), Some("instance_group"));
    assert_eq!(err.message, "'{' is never closed (expected '}' or a field name, but reached end of input)");

    let err = parse_err("input [ { name: \"x\" }");
    assert_eq!((err.line, err.column), (1, 7));
    assert_eq!(err.field.as_deref(), Some("input"));
    assert!(err.message.starts_with("'[' is never closed"), "{err}");
}

#[test]
fn end_of_input_inside_a_field() {
    let err = parse_err("max_batch_size: 4\nname:");
    assert_eq!((err.line, err.column), (2, 6));
    assert_eq!(err.field.as_deref(), Some("name"));
    assert_eq!(err.message, "expected a string, but reached end of input");
}

#[test]
fn stray_closing_brace() {
    let err = parse_err("max_batch_size: 1\n}\n");
    assert_eq!((err.line, err.column), (2, 1));
    assert_eq!(err.field, None);
}

#[test]
fn missing_colon_before_scalar() {
    let err = parse_err("max_batch_size 8");
    assert_eq!(err.field.as_deref(), Some("max_batch_size"));
    assert_eq!((err.line, err.column), (1, 16));
}

#[test]
fn field_set_twice() {
    let err = parse_err("max_batch_size: 1\nmax_batch_size: 2");
    assert_eq!((err.line, err.column), (2, 17));
    assert_eq!(err.field.as_deref(), Some("max_batch_size"));

    let err = parse_err("dynamic_batching { }\nsequence_batching { }");
    assert_eq!(err.field.as_deref(), Some("sequence_batching"));
    assert_eq!(err.message, "a value is already set for oneof 'scheduling_choice'");
}

#[test]
fn invalid_character_position_counts_characters() {
    // The non-ASCII string is 2 bytes per character; the column counts characters.
    let err = parse_err("name: \"ünï\" @");
    assert_eq!((err.line, err.column), (1, 13));
    assert_eq!(err.field, None);
}

#[test]
fn display_without_field_or_position() {
    let mut err =
        ConfigError { file: "f.pbtxt".to_owned(), line: 3, column: 1, field: None, message: "bad".to_owned() };
    assert_eq!(err.to_string(), "f.pbtxt:3:1: bad");
    err.line = 0;
    err.column = 0;
    assert_eq!(err.to_string(), "f.pbtxt: bad");
}

#[test]
fn prost_reflect_error_debug_shape_is_understood() {
    // Pins the Debug layout `error_details` relies on (see its doc comment).
    let descriptor = model_config_descriptor();
    let err = match DynamicMessage::parse_text_format(descriptor.clone(), "name: \"span: 1..2\" x: 1") {
        Ok(_) => panic!("unknown field accepted"),
        Err(err) => err,
    };
    let details = error_details(&err);
    assert_eq!(details.kind, "FieldNotFound");
    assert_eq!(details.span, Some(19..20));

    let err = match DynamicMessage::parse_text_format(descriptor, "max_batch_size: \"span: 1..2\"") {
        Ok(_) => panic!("string accepted as integer"),
        Err(err) => err,
    };
    let details = error_details(&err);
    assert_eq!(details.kind, "UnexpectedToken");
    assert_eq!(details.span, Some(16..28));
}

// ---------------------------------------------------------------------------------------------
// Pre-pass internals
// ---------------------------------------------------------------------------------------------

#[test]
fn colon_insertion_only_where_needed() {
    let descriptor = model_config_descriptor();
    let cases = [
        ("input [ ]", "input: [ ]"),
        ("input: [ ]", "input: [ ]"),
        ("input[{dims[1]}]", "input:[{dims:[1]}]"),
        ("name: \"input [\" # output [\n", "name: \"input [\" # output [\n"),
        ("name: 'a\\' [' input [", "name: 'a\\' [' input: ["),
        ("input { dims: [1] }", "input { dims: [1] }"),
        // Inside a list, identifiers are values (enum names), never field names.
        ("kind [ KIND_CPU [", "kind: [ KIND_CPU ["),
    ];
    for (text, expected) in cases {
        let patched = insert_list_colons(text, &tokenize(text), &descriptor);
        assert_eq!(patched.text, expected, "for {text:?}");
    }
}

#[test]
fn patched_offsets_map_back() {
    let descriptor = model_config_descriptor();
    let text = "a [{b [";
    let patched = insert_list_colons(text, &tokenize(text), &descriptor);
    assert_eq!(patched.text, "a: [{b: [");
    assert_eq!(patched.insertions, vec![1, 5]);
    let mapped: Vec<usize> = (0..patched.text.len()).map(|offset| patched.to_original(offset)).collect();
    //                        a  :  _  [  {  b  :  _  [
    assert_eq!(mapped, vec![0, 1, 1, 2, 3, 4, 5, 5, 6]);
}

#[test]
fn tokenizer_handles_strings_comments_and_numbers() {
    let text = "a: \"x#\\\"y\" # c 'd\nb: 'q' c: 1.5e-3f d: -0x1F e: .5";
    let kinds: Vec<(TokenKind, &str)> = tokenize(text).iter().map(|t| (t.kind, &text[t.start..t.end])).collect();
    assert_eq!(
        kinds,
        vec![
            (TokenKind::Ident, "a"),
            (TokenKind::Punct(b':'), ":"),
            (TokenKind::Str, "\"x#\\\"y\""),
            (TokenKind::Ident, "b"),
            (TokenKind::Punct(b':'), ":"),
            (TokenKind::Str, "'q'"),
            (TokenKind::Ident, "c"),
            (TokenKind::Punct(b':'), ":"),
            (TokenKind::Number, "1.5e-3f"),
            (TokenKind::Ident, "d"),
            (TokenKind::Punct(b':'), ":"),
            (TokenKind::Punct(b'-'), "-"),
            (TokenKind::Number, "0x1F"),
            (TokenKind::Ident, "e"),
            (TokenKind::Punct(b':'), ":"),
            (TokenKind::Number, ".5"),
        ]
    );
}

#[test]
fn unterminated_string_stops_at_line_end() {
    let text = "name: \"abc\ninput [";
    let tokens = tokenize(text);
    assert_eq!(&text[tokens[2].start..tokens[2].end], "\"abc");
    assert_eq!(tokens[3].kind, TokenKind::Ident);
}

// ---------------------------------------------------------------------------------------------
// JSON and text output
// ---------------------------------------------------------------------------------------------

#[test]
fn simple_config_json_matches_triton() {
    let json = config_to_json(&parse(SIMPLE));
    let tensor = |name: &str| {
        json!({
            "name": name,
            "data_type": "TYPE_INT32",
            "format": "FORMAT_NONE",
            "dims": [16],
            "is_shape_tensor": false,
            "allow_ragged_batch": false,
            "optional": false,
            "is_non_linear_format_io": false
        })
    };
    let output = |name: &str| {
        json!({
            "name": name,
            "data_type": "TYPE_INT32",
            "dims": [16],
            "label_filename": "",
            "is_shape_tensor": false,
            "is_non_linear_format_io": false
        })
    };
    let expected = json!({
        "name": "simple",
        "platform": "tensorflow_graphdef",
        "backend": "",
        "runtime": "",
        "max_batch_size": 8,
        "input": [tensor("INPUT0"), tensor("INPUT1")],
        "output": [output("OUTPUT0"), output("OUTPUT1")],
        "batch_input": [],
        "batch_output": [],
        "instance_group": [],
        "default_model_filename": "",
        "cc_model_filenames": {},
        "metric_tags": {},
        "parameters": {},
        "model_warmup": []
    });
    assert_eq!(json, expected);

    let text = json.to_string();
    assert!(text.contains(r#""dims":[16]"#), "{text}");
    assert!(text.contains(r#""data_type":"TYPE_INT32""#), "{text}");
    assert!(text.contains(r#""max_batch_size":8"#), "{text}");
    assert!(text.contains(r#""optional":false"#), "{text}");
}

#[test]
fn json_prints_only_the_set_oneof_member() {
    let json =
        config_to_json(&parse("version_policy { all {} } dynamic_batching { max_queue_delay_microseconds: 100 }"));
    assert_eq!(json["version_policy"], json!({ "all": {} }));
    assert_eq!(
        json["dynamic_batching"],
        json!({
            "preferred_batch_size": [],
            "max_queue_delay_microseconds": 100,
            "preserve_ordering": false,
            "priority_levels": 0,
            "default_priority_level": 0,
            "priority_queue_policy": {}
        })
    );
    assert!(json.get("sequence_batching").is_none());
    assert!(json.get("ensemble_scheduling").is_none());
    assert!(json.get("optimization").is_none());

    let warmup = config_to_json(&parse(KITCHEN_SINK));
    assert_eq!(
        warmup["model_warmup"][0]["inputs"]["data"],
        json!({ "data_type": "TYPE_FP32", "dims": [3, 224, 224], "zero_data": true })
    );
}

#[test]
fn json_numbers() {
    let json = config_to_json(&parse(
        r#"
        dynamic_batching { max_queue_delay_microseconds: 18446744073709551615
                           priority_queue_policy { key: 2 value { default_timeout_microseconds: 7 } } }
        input { dims: [ -1, 9007199254740993 ] }
        "#,
    ));
    assert_eq!(json["dynamic_batching"]["max_queue_delay_microseconds"], json!(u64::MAX));
    // Map keys are strings in JSON, whatever their protobuf type.
    assert_eq!(json["dynamic_batching"]["priority_queue_policy"]["2"]["default_timeout_microseconds"], json!(7));
    assert_eq!(json["input"][0]["dims"], json!([-1, 9_007_199_254_740_993_i64]));

    let json = config_to_json(&parse(SEQUENCE));
    let control = &json["sequence_batching"]["control_input"][0]["control"][0];
    assert_eq!(control["fp32_false_true"].to_string(), "[0,1]");

    let json = config_to_json(&parse("sequence_batching { direct { minimum_slot_utilization: 0.1 } }"));
    assert_eq!(json["sequence_batching"]["direct"]["minimum_slot_utilization"].to_string(), "0.1");
}

#[test]
fn json_round_trip() {
    let floats = "sequence_batching { direct { minimum_slot_utilization: 0.1 } }";
    for text in [SIMPLE, SEQUENCE, ENSEMBLE, KITCHEN_SINK, floats, ""] {
        let cfg = parse(text);
        let json = config_to_json(&cfg).to_string();
        assert_eq!(config_from_json(&json), Ok(cfg), "for {json}");
    }
}

#[test]
fn json_input_variants() {
    let cfg = config_from_json(
        r#"{
            "name": "m",
            "maxBatchSize": "4",
            "input": [ { "name": "x", "data_type": "TYPE_FP32", "dims": ["16", 4, -1] } ],
            "dynamic_batching": { "max_queue_delay_microseconds": "100" },
            "instance_group": [ { "kind": 2, "count": 1 } ]
        }"#,
    );
    let expected = ModelConfig {
        name: "m".to_owned(),
        max_batch_size: 4,
        input: vec![ModelInput {
            name: "x".to_owned(),
            data_type: DataType::TypeFp32.into(),
            dims: vec![16, 4, -1],
            ..ModelInput::default()
        }],
        scheduling_choice: Some(SchedulingChoice::DynamicBatching(crate::proto::inference::ModelDynamicBatching {
            max_queue_delay_microseconds: 100,
            ..Default::default()
        })),
        instance_group: vec![crate::proto::inference::ModelInstanceGroup {
            kind: InstanceKind::Cpu.into(),
            count: 1,
            ..Default::default()
        }],
        ..ModelConfig::default()
    };
    assert_eq!(cfg, Ok(expected));
}

#[test]
fn json_errors() {
    let err = config_from_json(r#"{ "max_batch_size": 8, "max_batch_sizee": 8 }"#);
    assert!(matches!(&err, Err(e) if e.message.contains("unrecognized field name 'max_batch_sizee'")), "{err:?}");
    let err = config_from_json(r#"{ "input": [ { "data_type": "TYPE_NOPE" } ] }"#);
    assert!(matches!(&err, Err(e) if e.message.contains("TYPE_NOPE")), "{err:?}");
    assert!(config_from_json("{ \"max_batch_size\": \"eight\" }").is_err());
    assert!(config_from_json("[]").is_err());
    assert!(config_from_json("{} {}").is_err());
    assert!(config_from_json("{").is_err());
}

#[test]
fn pbtxt_round_trip() {
    let floats = "sequence_batching { direct { minimum_slot_utilization: 0.1 } }";
    for text in [SIMPLE, SEQUENCE, ENSEMBLE, KITCHEN_SINK, floats, ""] {
        let cfg = parse(text);
        let printed = config_to_pbtxt(&cfg);
        assert_eq!(parse(&printed), cfg, "for:\n{printed}");
    }
    assert_eq!(config_to_pbtxt(&ModelConfig::default()), "");
}

#[test]
fn pbtxt_output_is_readable() {
    let printed = config_to_pbtxt(&parse(SIMPLE));
    assert!(printed.starts_with("name: \"simple\"\nplatform: \"tensorflow_graphdef\"\n"), "{printed}");
    assert!(printed.contains("data_type: TYPE_INT32"), "{printed}");
    assert!(printed.contains("dims: [16]"), "{printed}");
    assert!(printed.ends_with('\n'));
}

#[test]
fn edit_distance_and_suggestions() {
    assert_eq!(edit_distance("kitten", "sitting"), 3);
    assert_eq!(edit_distance("", "abc"), 3);
    assert_eq!(edit_distance("Dims", "dims"), 0);
    let names = ["name", "dims", "data_type"];
    assert_eq!(closest("dim", names.into_iter()), Some("dims"));
    assert_eq!(closest("data_typ", names.into_iter()), Some("data_type"));
    assert_eq!(closest("xyz", names.into_iter()), None);
}
