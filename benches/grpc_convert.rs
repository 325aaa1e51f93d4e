//! gRPC request → core conversion (and back) for the `simple` model: protobuf decoding of the wire
//! bytes plus `convert::request_from_proto`, and `response_to_proto` plus encoding.
//! Run: `cargo bench --bench grpc_convert`.

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion};
use prost::Message;
use std::hint::black_box;
use tritonrs::frontend::grpc::convert::{request_from_proto, response_to_proto};
use tritonrs::model_api::types::{DataType, InferResponse, Parameters, Tensor};
use tritonrs::proto::inference::model_infer_request::InferInputTensor;
use tritonrs::proto::inference::{ModelInferRequest, ModelInferResponse};

fn raw() -> Bytes {
    Bytes::from((0..16i32).flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>())
}

fn bench(c: &mut Criterion) {
    let input = |name: &str| InferInputTensor {
        name: name.into(),
        datatype: "INT32".into(),
        shape: vec![1, 16],
        ..Default::default()
    };
    let req = ModelInferRequest {
        model_name: "simple".into(),
        inputs: vec![input("INPUT0"), input("INPUT1")],
        raw_input_contents: vec![raw(), raw()],
        ..Default::default()
    };
    let wire = Bytes::from(req.encode_to_vec());
    c.bench_function("grpc_request_decode_and_convert", |b| {
        b.iter(|| {
            let r = ModelInferRequest::decode(black_box(wire.clone())).expect("valid protobuf");
            request_from_proto(r).expect("valid request")
        })
    });
    let out = |name: &str| Tensor::new(name, DataType::Int32, vec![1, 16], raw());
    let resp = InferResponse {
        model_name: "simple".into(),
        model_version: 1,
        id: String::new(),
        outputs: vec![out("OUTPUT0"), out("OUTPUT1")],
        parameters: Parameters::new(),
    };
    c.bench_function("grpc_response_convert_and_encode", |b| {
        b.iter(|| {
            let r: ModelInferResponse = response_to_proto(black_box(resp.clone())).expect("convertible");
            r.encode_to_vec()
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
