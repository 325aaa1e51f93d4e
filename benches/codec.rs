//! KServe codec micro-benchmarks: decoding a JSON and a binary infer request for `simple`, and encoding
//! its response both ways. Run: `cargo bench --bench codec`.

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion};
use std::hint::black_box;
use tritonrs::kserve::{decode_request, encode_response};
use tritonrs::model_api::types::{DataType, InferResponse, Parameters, Tensor};

fn json_request() -> Bytes {
    let data: Vec<String> = (0..16).map(|i| i.to_string()).collect();
    let d = data.join(",");
    Bytes::from(format!(
        r#"{{"inputs":[{{"name":"INPUT0","shape":[1,16],"datatype":"INT32","data":[{d}]}},{{"name":"INPUT1","shape":[1,16],"datatype":"INT32","data":[{d}]}}]}}"#
    ))
}

fn binary_request() -> (Bytes, usize) {
    let header = br#"{"inputs":[{"name":"INPUT0","shape":[1,16],"datatype":"INT32","parameters":{"binary_data_size":64}},{"name":"INPUT1","shape":[1,16],"datatype":"INT32","parameters":{"binary_data_size":64}}],"outputs":[{"name":"OUTPUT0","parameters":{"binary_data":true}},{"name":"OUTPUT1","parameters":{"binary_data":true}}]}"#;
    let mut body = header.to_vec();
    body.extend((0..32i32).flat_map(|v| v.to_le_bytes()));
    (Bytes::from(body), header.len())
}

fn response() -> InferResponse {
    let out = |name: &str| {
        Tensor::new(name, DataType::Int32, vec![1, 16], (0..16i32).flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>())
    };
    InferResponse {
        model_name: "simple".into(),
        model_version: 1,
        id: String::new(),
        outputs: vec![out("OUTPUT0"), out("OUTPUT1")],
        parameters: Parameters::new(),
    }
}

fn bench(c: &mut Criterion) {
    let json = json_request();
    c.bench_function("decode_json_simple", |b| {
        b.iter(|| decode_request(black_box(json.clone()), None, "simple", None))
    });
    let (bin, header_len) = binary_request();
    c.bench_function("decode_binary_simple", |b| {
        b.iter(|| decode_request(black_box(bin.clone()), Some(header_len), "simple", None))
    });
    let resp = response();
    c.bench_function("encode_json_simple", |b| b.iter(|| encode_response(black_box(&resp), |_| false)));
    c.bench_function("encode_binary_simple", |b| b.iter(|| encode_response(black_box(&resp), |_| true)));
}

criterion_group!(benches, bench);
criterion_main!(benches);
