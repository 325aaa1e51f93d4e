//! Unit tests of `frontend/grpc/convert.rs`.

use super::*;
use crate::proto::inference::model_infer_request::InferRequestedOutputTensor;

fn input(name: &str, dt: &str, shape: Vec<i64>, contents: Option<InferTensorContents>) -> InferInputTensor {
    InferInputTensor { name: name.into(), datatype: dt.into(), shape, parameters: HashMap::new(), contents }
}

#[test]
fn raw_inputs_are_shared_and_outputs_get_classification() {
    let raw = Bytes::from_static(&[1, 0, 0, 0, 2, 0, 0, 0]);
    let mut params = HashMap::new();
    params.insert(
        "classification".to_string(),
        InferParameter { parameter_choice: Some(ParameterChoice::Int64Param(2)) },
    );
    let req = ModelInferRequest {
        model_name: "m".into(),
        model_version: "3".into(),
        id: "x".into(),
        inputs: vec![input("IN", "INT32", vec![1, 2], None)],
        outputs: vec![InferRequestedOutputTensor { name: "OUT".into(), parameters: params }],
        raw_input_contents: vec![raw.clone()],
        ..Default::default()
    };
    let r = request_from_proto(req).unwrap();
    assert_eq!(r.model_version, Some(3));
    assert_eq!(r.id, "x");
    let data = r.inputs[0].data.as_host().unwrap();
    assert_eq!(data.as_ptr(), raw.as_ptr(), "raw contents must not be copied");
    assert_eq!(r.outputs[0].class_count, 2);
}

#[test]
fn typed_contents_become_little_endian_bytes() {
    let c = InferTensorContents { int_contents: vec![1, -1], ..Default::default() };
    let req = ModelInferRequest { inputs: vec![input("IN", "INT16", vec![2], Some(c))], ..Default::default() };
    let r = request_from_proto(req).unwrap();
    assert_eq!(&r.inputs[0].data.as_host().unwrap()[..], &[1, 0, 0xff, 0xff]);

    let c = InferTensorContents { bytes_contents: vec![b"ab".to_vec()], ..Default::default() };
    let req = ModelInferRequest { inputs: vec![input("S", "BYTES", vec![1], Some(c))], ..Default::default() };
    let r = request_from_proto(req).unwrap();
    assert_eq!(&r.inputs[0].data.as_host().unwrap()[..], b"\x02\0\0\0ab");
}

#[test]
fn bad_requests_are_invalid_argument() {
    let wrong_field = InferTensorContents { fp32_contents: vec![1.0], ..Default::default() };
    let out_of_range = InferTensorContents { int_contents: vec![300], ..Default::default() };
    for req in [
        ModelInferRequest { inputs: vec![input("IN", "INT33", vec![1], None)], ..Default::default() },
        ModelInferRequest { inputs: vec![input("IN", "INT32", vec![1], None)], ..Default::default() },
        ModelInferRequest { inputs: vec![input("IN", "INT32", vec![1], Some(wrong_field))], ..Default::default() },
        ModelInferRequest { inputs: vec![input("IN", "INT8", vec![1], Some(out_of_range))], ..Default::default() },
        ModelInferRequest {
            inputs: vec![input("A", "INT32", vec![1], None), input("B", "INT32", vec![1], None)],
            raw_input_contents: vec![Bytes::from_static(&[0; 4])],
            ..Default::default()
        },
        ModelInferRequest { model_version: "x".into(), ..Default::default() },
    ] {
        let e = request_from_proto(req).unwrap_err();
        assert_eq!(e.grpc_code(), 3, "{e}");
    }
}

#[test]
fn raw_contents_go_to_the_inputs_outside_shared_memory_in_order() {
    let shm = |region: &str| {
        let mut p = HashMap::new();
        p.insert(
            "shared_memory_region".to_string(),
            InferParameter { parameter_choice: Some(ParameterChoice::StringParam(region.into())) },
        );
        p.insert(
            "shared_memory_byte_size".to_string(),
            InferParameter { parameter_choice: Some(ParameterChoice::Int64Param(4)) },
        );
        p
    };
    let mut a = input("A", "INT32", vec![1], None);
    a.parameters = shm("r");
    let req = ModelInferRequest {
        model_name: "m".into(),
        inputs: vec![a.clone(), input("B", "INT32", vec![1], None)],
        raw_input_contents: vec![Bytes::from_static(&[7, 0, 0, 0])],
        ..Default::default()
    };
    let r = request_from_proto(req).unwrap();
    assert!(r.inputs[0].data.is_empty());
    assert_eq!(&r.inputs[1].data.as_host().unwrap()[..], &[7, 0, 0, 0]);

    // Typed contents beside raw contents, and contents on an input in shared memory: Triton's messages.
    let c = InferTensorContents { int_contents: vec![1], ..Default::default() };
    let req = ModelInferRequest {
        model_name: "m".into(),
        inputs: vec![input("A", "INT32", vec![1], Some(c.clone())), input("B", "INT32", vec![1], None)],
        raw_input_contents: vec![Bytes::from_static(&[7, 0, 0, 0])],
        ..Default::default()
    };
    assert_eq!(
        request_from_proto(req).unwrap_err().message,
        "contents field must not be specified when using raw_input_contents for 'A' for model 'm'"
    );
    a.contents = Some(c);
    let req = ModelInferRequest { model_name: "m".into(), inputs: vec![a], ..Default::default() };
    assert_eq!(
        request_from_proto(req).unwrap_err().message,
        "unexpected 'content' provided when using shared memory for input tensor 'A' for model 'm'"
    );
}

#[test]
fn parameters_round_trip() {
    let mut p = Parameters::new();
    p.insert("b".into(), ParamValue::Bool(true));
    p.insert("i".into(), ParamValue::Int(-4));
    p.insert("u".into(), ParamValue::Uint(7));
    p.insert("d".into(), ParamValue::Double(0.5));
    p.insert("s".into(), ParamValue::String("x".into()));
    assert_eq!(params_from_proto(params_to_proto(&p)).unwrap(), p);
}
