use super::*;
use crate::error::ErrorKind;
use crate::model_api::types::{serialize_bytes, DataType, InferRequest, RequestedOutput, Tensor};

fn spec(name: &str, dt: DataType, dims: &[i64]) -> TensorSpec {
    TensorSpec { name: name.into(), datatype: dt, dims: dims.to_vec(), reshape: None, optional: false }
}

fn simple_io() -> ModelIo {
    ModelIo {
        max_batch_size: 8,
        inputs: vec![spec("A", DataType::Int32, &[4]), spec("B", DataType::Int32, &[-1])],
        outputs: vec![spec("C", DataType::Int32, &[4]), spec("S", DataType::Bytes, &[1])],
    }
}

fn i32s(name: &str, shape: Vec<i64>, n: usize) -> Tensor {
    Tensor::new(name, DataType::Int32, shape, vec![0u8; n * 4])
}

fn req(inputs: Vec<Tensor>) -> InferRequest {
    InferRequest { model_name: "m".into(), inputs, ..Default::default() }
}

fn err(r: Result<Prepared>) -> String {
    let e = r.unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArgument, "{}", e.message);
    e.message
}

#[test]
fn valid_request_gets_batch_size_and_all_outputs() {
    let p = prepare(&simple_io(), "m", req(vec![i32s("A", vec![2, 4], 8), i32s("B", vec![2, 3], 6)])).unwrap();
    assert_eq!(p.batch_size, 2);
    assert_eq!(p.exec.outputs, vec!["C", "S"]);
    assert_eq!(p.outputs.len(), 2);
}

#[test]
fn each_bad_request_class_is_invalid_argument() {
    let io = simple_io();
    let good_b = || i32s("B", vec![1, 2], 2);
    assert!(err(prepare(&io, "m", req(vec![i32s("X", vec![1, 4], 4), good_b()])))
        .contains("unexpected inference input 'X'"));
    assert!(err(prepare(&io, "m", req(vec![Tensor::new("A", DataType::Fp32, vec![1, 4], vec![0u8; 16]), good_b()])))
        .contains("data-type is 'FP32'"));
    assert!(
        err(prepare(&io, "m", req(vec![i32s("A", vec![1, 5], 5), good_b()]))).contains("Expected [-1,4], got [1,5]")
    );
    assert!(err(prepare(&io, "m", req(vec![i32s("A", vec![9, 4], 36), i32s("B", vec![9, 1], 9)])))
        .contains("batch-size must be <= 8"));
    assert!(
        err(prepare(&io, "m", req(vec![i32s("A", vec![1, 4], 3), good_b()]))).contains("unexpected total byte size 12")
    );
    // tritonserver 2.51's words.
    assert_eq!(
        err(prepare(&io, "m", req(vec![i32s("A", vec![1, 4], 4)]))),
        "[request id: <id_unknown>] expected 2 inputs but got 1 inputs for model 'm'. Got input(s) ['A'], but \
         missing required input(s) ['B']. Please provide all required input(s)."
    );
    assert!(err(prepare(&io, "m", req(vec![i32s("A", vec![2, 4], 8), good_b()]))).contains("batch size"));
    assert!(err(prepare(&io, "m", req(vec![i32s("A", vec![1, 4], 4), good_b(), i32s("A", vec![1, 4], 4)])))
        .contains("more than once"));
    let mut r = req(vec![i32s("A", vec![1, 4], 4), good_b()]);
    r.outputs = vec![RequestedOutput { name: "nope".into(), ..Default::default() }];
    assert!(err(prepare(&io, "m", r)).contains("unexpected inference output 'nope'"));
    let mut r = req(vec![i32s("A", vec![1, 4], 4), good_b()]);
    r.outputs = vec![RequestedOutput { name: "S".into(), class_count: 1, ..Default::default() }];
    assert!(err(prepare(&io, "m", r)).contains("classification"));
}

#[test]
fn bytes_inputs_count_elements() {
    let io = ModelIo { max_batch_size: 0, inputs: vec![spec("T", DataType::Bytes, &[2])], outputs: vec![] };
    let ok = Tensor::new("T", DataType::Bytes, vec![2], serialize_bytes(["a", "bc"]));
    assert!(prepare(&io, "m", req(vec![ok])).is_ok());
    let short = Tensor::new("T", DataType::Bytes, vec![2], serialize_bytes(["a"]));
    assert!(err(prepare(&io, "m", req(vec![short]))).contains("holds 1 BYTES elements"));
    let broken = Tensor::new("T", DataType::Bytes, vec![2], vec![9u8, 0, 0, 0, b'x']);
    assert!(err(prepare(&io, "m", req(vec![broken]))).contains("truncated"));
}

#[test]
fn optional_inputs_may_be_omitted_and_reshape_applies() {
    let mut a = spec("A", DataType::Fp32, &[2, 3]);
    a.reshape = Some(vec![6]);
    let mut o = spec("O", DataType::Fp32, &[1]);
    o.optional = true;
    let io = ModelIo { max_batch_size: 4, inputs: vec![a, o], outputs: vec![] };
    let t = Tensor::new("A", DataType::Fp32, vec![3, 2, 3], vec![0u8; 3 * 6 * 4]);
    let p = prepare(&io, "m", req(vec![t])).unwrap();
    assert_eq!(p.exec.inputs[0].shape, vec![3, 6]);
    assert_eq!(p.batch_size, 3);
}

#[test]
fn non_batching_models_take_exact_dims() {
    let io = ModelIo { max_batch_size: 0, inputs: vec![spec("A", DataType::Int32, &[-1, 2])], outputs: vec![] };
    assert!(prepare(&io, "m", req(vec![i32s("A", vec![3, 2], 6)])).is_ok());
    assert!(err(prepare(&io, "m", req(vec![i32s("A", vec![1, 3, 2], 6)]))).contains("unexpected shape"));
    assert!(
        err(prepare(&io, "m", req(vec![Tensor::new("A", DataType::Int32, vec![-3, 2], vec![])]))).contains("negative")
    );
}

#[test]
fn wildcards_resolve_from_element_count() {
    assert_eq!(resolve_wildcards(&[-1, 4], 12), vec![3, 4]);
    assert_eq!(resolve_wildcards(&[2, 3], 6), vec![2, 3]);
}
