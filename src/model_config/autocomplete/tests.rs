//! Unit tests of `model_config/autocomplete.rs`.

use super::*;

fn io(name: &str, dt: i32, dims: &[i64]) -> IoInfo {
    IoInfo { name: name.into(), data_type: dt, dims: dims.to_vec() }
}

#[test]
fn dynamic_first_dim_enables_batching() {
    let info = ModelIoInfo {
        inputs: vec![io("A", 11, &[-1, 8]), io("B", 11, &[-1, 8])],
        outputs: vec![io("C", 11, &[-1, 8])],
    };
    let mut cfg = ModelConfig { name: "m".into(), ..Default::default() };
    complete_onnx(&mut cfg, &info, 4);
    assert_eq!(cfg.max_batch_size, 4);
    assert_eq!(cfg.input.len(), 2);
    assert_eq!(cfg.input[0].dims, vec![8]);
    assert_eq!(cfg.input[0].data_type, 11);
    assert_eq!(cfg.output[0].dims, vec![8]);
    assert!(matches!(cfg.scheduling_choice, Some(SchedulingChoice::DynamicBatching(_))));
    assert_eq!(cfg.backend, "onnxruntime");
    assert_eq!(cfg.platform, "onnxruntime_onnx");
}

#[test]
fn fixed_first_dim_means_no_batching() {
    let info = ModelIoInfo { inputs: vec![io("A", 8, &[1, 3])], outputs: vec![io("B", 8, &[1, 3])] };
    let mut cfg = ModelConfig::default();
    complete_onnx(&mut cfg, &info, 4);
    assert_eq!(cfg.max_batch_size, 0);
    assert_eq!(cfg.input[0].dims, vec![1, 3]);
    assert!(cfg.scheduling_choice.is_none());
}

#[test]
fn partial_config_is_completed_not_overridden() {
    let info = ModelIoInfo { inputs: vec![io("A", 11, &[-1, -1])], outputs: vec![io("B", 11, &[-1, -1])] };
    let mut cfg = ModelConfig {
        max_batch_size: 2,
        input: vec![ModelInput { name: "A".into(), dims: vec![5], ..Default::default() }],
        ..Default::default()
    };
    complete_onnx(&mut cfg, &info, 4);
    assert_eq!(cfg.max_batch_size, 2);
    assert_eq!(cfg.input[0].dims, vec![5]);
    assert_eq!(cfg.input[0].data_type, 11);
    assert_eq!(cfg.output[0].dims, vec![-1]);
}

#[test]
fn full_rank_config_dims_disable_batching() {
    let info = ModelIoInfo { inputs: vec![io("A", 11, &[-1, 4])], outputs: vec![io("B", 11, &[-1, 4])] };
    let mut cfg = ModelConfig {
        input: vec![ModelInput { name: "A".into(), data_type: 11, dims: vec![-1, 4], ..Default::default() }],
        ..Default::default()
    };
    complete_onnx(&mut cfg, &info, 4);
    assert_eq!(cfg.max_batch_size, 0);
    assert_eq!(cfg.output[0].dims, vec![-1, 4]);
}

#[test]
fn sequence_control_and_state_tensors_are_not_filled_in() {
    use crate::proto::inference::model_sequence_batching::{control::Kind, Control, ControlInput, State};
    use crate::proto::inference::ModelSequenceBatching;
    let info = ModelIoInfo {
        inputs: vec![io("INPUT", 8, &[-1, 1]), io("START", 8, &[-1, 1]), io("STATE_IN", 8, &[-1, 1])],
        outputs: vec![io("OUTPUT", 8, &[-1, 1]), io("STATE_OUT", 8, &[-1, 1])],
    };
    let seq = ModelSequenceBatching {
        control_input: vec![ControlInput {
            name: "START".into(),
            control: vec![Control {
                kind: Kind::ControlSequenceStart as i32,
                int32_false_true: vec![0, 1],
                ..Default::default()
            }],
        }],
        state: vec![State {
            input_name: "STATE_IN".into(),
            output_name: "STATE_OUT".into(),
            data_type: 8,
            dims: vec![1],
            ..Default::default()
        }],
        ..Default::default()
    };
    let mut cfg =
        ModelConfig { scheduling_choice: Some(SchedulingChoice::SequenceBatching(seq)), ..Default::default() };
    complete_onnx(&mut cfg, &info, 4);
    assert_eq!(cfg.input.iter().map(|i| i.name.as_str()).collect::<Vec<_>>(), ["INPUT"]);
    assert_eq!(cfg.output.iter().map(|o| o.name.as_str()).collect::<Vec<_>>(), ["OUTPUT"]);
    assert_eq!(cfg.max_batch_size, 4);
    assert!(matches!(cfg.scheduling_choice, Some(SchedulingChoice::SequenceBatching(_))));
}

fn config(max_batch_size: i32, in_dims: &[i64]) -> ModelConfig {
    ModelConfig {
        name: "m".into(),
        max_batch_size,
        input: vec![ModelInput { name: "A".into(), data_type: 11, dims: in_dims.to_vec(), ..Default::default() }],
        output: vec![ModelOutput {
            name: "B".into(),
            data_type: 11,
            dims: if max_batch_size > 0 { vec![-1] } else { vec![-1, -1] },
            ..Default::default()
        }],
        ..Default::default()
    }
}

#[test]
fn io_check_compares_names_types_and_shapes() {
    let info = ModelIoInfo { inputs: vec![io("A", 11, &[-1, 16])], outputs: vec![io("B", 11, &[-1, -1])] };
    check_io(&config(8, &[16]), &info, "ONNX model").unwrap();
    check_io(&config(0, &[-1, 16]), &info, "ONNX model").unwrap();
    check_io(&config(0, &[3, 16]), &info, "ONNX model").unwrap();
    // The case: dims [8] for an input of 16; both shapes are named.
    let e = check_io(&config(8, &[8]), &info, "ONNX model").unwrap_err().message;
    assert!(e.contains("[8]") && e.contains("[-1,16]") && e.contains("input 'A'"), "{e}");
    let e = check_io(&config(8, &[16, 1]), &info, "ONNX model").unwrap_err().message;
    assert!(e.contains("does not match"), "{e}");
    // A variable configured dimension where the model's is fixed cannot be served either.
    assert!(check_io(&config(8, &[-1]), &info, "ONNX model").is_err());
    // Batching needs a variable first dimension in the model.
    let fixed = ModelIoInfo { inputs: vec![io("A", 11, &[1, 16])], outputs: vec![io("B", 11, &[1, 16])] };
    let e = check_io(&config(8, &[16]), &fixed, "ONNX model").unwrap_err().message;
    assert!(e.contains("variable batch dimension"), "{e}");
    let mut wrong_type = config(8, &[16]);
    wrong_type.input[0].data_type = 8;
    let e = check_io(&wrong_type, &info, "ONNX model").unwrap_err().message;
    assert!(e.contains("FP32 in the ONNX model") && e.contains("says INT32"), "{e}");
    let mut unknown = config(8, &[16]);
    unknown.output[0].name = "C".into();
    let e = check_io(&unknown, &info, "ONNX model").unwrap_err().message;
    assert!(e.contains("not an output of the ONNX model"), "{e}");
    // Unknown model shapes and reshaped tensors are compared as Triton does.
    let unknown_shape = ModelIoInfo { inputs: vec![io("A", 11, &[])], outputs: vec![io("B", 11, &[])] };
    check_io(&config(8, &[5]), &unknown_shape, "ONNX model").unwrap();
    let mut reshaped = config(8, &[4, 4]);
    reshaped.input[0].reshape = Some(crate::proto::inference::ModelTensorReshape { shape: vec![16] });
    check_io(&reshaped, &info, "ONNX model").unwrap();
}

#[test]
fn garbage_is_a_clear_error() {
    let err = onnx_io_from_bytes(b"\xff\xff\xff not onnx").unwrap_err();
    assert!(err.message.contains("not a valid ONNX model"), "{}", err.message);
}

#[test]
fn io_check_accepts_batch_inputs_and_flat_scattered_outputs() {
    use crate::proto::inference::{BatchInput, BatchOutput};
    // The model takes A (ragged, flat) and COUNT (a batch input); B is flat, scattered with A's shape.
    let info =
        ModelIoInfo { inputs: vec![io("A", 11, &[-1]), io("COUNT", 8, &[-1])], outputs: vec![io("B", 11, &[-1])] };
    let mut cfg = config(8, &[-1]);
    cfg.input[0].allow_ragged_batch = true;
    cfg.output[0].dims = vec![-1];
    let e = check_io(&cfg, &info, "ONNX model").unwrap_err().message;
    assert!(e.contains("does not declare") || e.contains("does not match"), "{e}");
    cfg.batch_input.push(BatchInput {
        kind: 0,
        target_name: vec!["COUNT".into()],
        data_type: 8,
        source_input: vec!["A".into()],
    });
    cfg.batch_output.push(BatchOutput { target_name: vec!["B".into()], kind: 0, source_input: vec!["A".into()] });
    check_io(&cfg, &info, "ONNX model").unwrap();
    // The batch input's type is checked against the model's like any input's.
    cfg.batch_input[0].data_type = 11;
    assert!(check_io(&cfg, &info, "ONNX model").is_err());
}
