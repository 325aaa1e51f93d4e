//! Unit tests of the generate extension's codec; the cases and words are tritonserver 2.51's answers to
//! the same requests (tests/python/test_generate.py compares the two servers end to end).

use super::*;
use crate::error::ErrorKind;
use crate::model_api::types::Parameters;

fn inputs() -> Vec<GenerateInput> {
    let i = |name: &str, datatype, shape: &[i64]| GenerateInput { name: name.into(), datatype, shape: shape.to_vec() };
    vec![
        i("text_input", DataType::Bytes, &[1]),
        i("scale", DataType::Fp32, &[-1]),
        i("grid", DataType::Int32, &[2, 2]),
        i("batched", DataType::Int32, &[-1, 3]),
        i("two", DataType::Int32, &[-1, -1]),
        i("flag", DataType::Bool, &[1]),
        i("u8", DataType::Uint8, &[-1]),
        i("half", DataType::Fp16, &[-1]),
        i("words", DataType::Bytes, &[-1]),
    ]
}

fn decode(body: &str) -> Result<InferRequest> {
    decode_generate(body.as_bytes(), "m", Some(1), &inputs())
}

fn invalid(body: &str) -> String {
    let e = decode(body).unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArgument, "{}", e.message);
    e.message
}

fn input<'a>(r: &'a InferRequest, name: &str) -> &'a Tensor {
    r.inputs.iter().find(|t| t.name == name).unwrap()
}

fn bytes_of(t: &Tensor) -> Vec<u8> {
    t.data.to_host().unwrap().to_vec()
}

#[test]
fn fields_become_inputs_of_the_declared_type_and_shape() {
    let r = decode(r#"{"text_input":"hi","scale":[1,2.5],"grid":[1,2,3,4],"flag":true,"u8":7}"#).unwrap();
    assert_eq!((r.model_name.as_str(), r.model_version, r.id.as_str()), ("m", Some(1), ""));
    let t = input(&r, "text_input");
    assert_eq!((t.datatype, t.shape.clone(), bytes_of(t)), (DataType::Bytes, vec![1], b"\x02\0\0\0hi".to_vec()));
    let t = input(&r, "scale");
    assert_eq!(t.shape, vec![2]);
    assert_eq!(bytes_of(t), [1.0f32.to_le_bytes(), 2.5f32.to_le_bytes()].concat());
    assert_eq!(input(&r, "grid").shape, vec![2, 2]);
    assert_eq!((input(&r, "flag").shape.clone(), bytes_of(input(&r, "flag"))), (vec![1], vec![1]));
    assert_eq!((input(&r, "u8").shape.clone(), bytes_of(input(&r, "u8"))), (vec![1], vec![7]));
    assert!(r.parameters.is_empty());
}

#[test]
fn wildcards_take_the_count_as_tritonserver_resolves_them() {
    assert_eq!(input(&decode(r#"{"batched":[1,2,3,4,5,6]}"#).unwrap(), "batched").shape, vec![2, 3]);
    assert_eq!(input(&decode(r#"{"two":[1,2,3]}"#).unwrap(), "two").shape, vec![1, 3]);
    assert_eq!(input(&decode(r#"{"two":[]}"#).unwrap(), "two").shape, vec![1, 0]);
    assert_eq!(input(&decode(r#"{"scale":7}"#).unwrap(), "scale").shape, vec![1]);
    assert_eq!(input(&decode(r#"{"scale":[]}"#).unwrap(), "scale").shape, vec![0]);
    assert_eq!(resolve_shape(&[-1, 2], 0), Some(vec![0, 2]));
    assert_eq!(resolve_shape(&[0, -1], 0), None);
    assert_eq!(resolve_shape(&[i64::MAX, 4], 4), None);
    // A list nested in a list counts as one element of the top level, then as its own elements.
    assert_eq!(input(&decode(r#"{"words":[["a"]]}"#).unwrap(), "words").shape, vec![1]);
    for body in
        [r#"{"grid":[[1,2],[3,4]]}"#, r#"{"text_input":["a","b"]}"#, r#"{"text_input":[]}"#, r#"{"batched":[1,2]}"#]
    {
        let name = body[2..].split('"').next().unwrap();
        assert_eq!(invalid(body), format!("The schema can not convert input '{name}' to tensor with proper shape"));
    }
}

#[test]
fn other_fields_and_parameters_become_request_parameters() {
    let r = decode(
        r#"{"text_input":"x","parameters":{"a":1,"b":"s","c":true,"d":1.5,"big":18446744073709551615},"id":"r1","e":-5}"#,
    )
    .unwrap();
    assert_eq!(r.id, "r1");
    let want: Parameters = [
        ("a", ParamValue::Int(1)),
        ("b", ParamValue::String("s".into())),
        ("c", ParamValue::Bool(true)),
        ("d", ParamValue::Double(1.5)),
        ("big", ParamValue::Double(18446744073709551615.0)),
        ("id", ParamValue::String("r1".into())),
        ("e", ParamValue::Int(-5)),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    assert_eq!(r.parameters, want);
    // An input's name inside `parameters` is that input, as in tritonserver; `id` there is no id.
    let r = decode(r#"{"parameters":{"text_input":"via","id":"p"}}"#).unwrap();
    assert_eq!((bytes_of(input(&r, "text_input")), r.id.as_str()), (b"\x03\0\0\0via".to_vec(), ""));
}

#[test]
fn parameter_and_id_errors_have_tritonservers_words() {
    let bad = "parameter 'x' has invalid type. It should be either 'int', 'bool', or 'string'.";
    for v in ["[1]", "{\"a\":1}", "null"] {
        assert_eq!(invalid(&format!(r#"{{"x":{v}}}"#)), bad);
        assert_eq!(
            invalid(&format!(r#"{{"parameters":{{"x":{v}}}}}"#)),
            format!("Converting keyword: 'parameters': {bad}")
        );
    }
    let not_object = "Expected JSON object for keyword: 'parameters': attempt to access JSON non-object as object";
    assert_eq!(invalid(r#"{"parameters":5}"#), not_object);
    assert_eq!(invalid(r#"{"parameters":null}"#), not_object);
    assert_eq!(invalid(r#"{"id":5}"#), "Unable to parse 'id': attempt to access JSON non-string as string");
}

#[test]
fn malformed_bodies() {
    assert_eq!(invalid(""), "failed to parse the request JSON buffer: The document is empty. at 0");
    assert!(invalid(r#"{"text_input":"#).starts_with("failed to parse the request JSON buffer: "));
    assert!(invalid(r#"{"a":1} x"#).starts_with("failed to parse the request JSON buffer: "));
    assert!(invalid(r#"{"a":1e400}"#).starts_with("failed to parse the request JSON buffer: "));
    assert!(invalid(r#"{"scale":[1e400]}"#).starts_with("failed to parse the request JSON buffer: "));
    for body in ["[1,2]", "\"x\"", "5"] {
        assert_eq!(invalid(body), "attempt to get members for non-object");
    }
    assert_eq!(
        invalid(r#"{"id":"q","text_input":"a","text_input":"b"}"#),
        "[request id: q] input 'text_input' already exists in request"
    );
}

#[test]
fn data_errors_have_tritonservers_words() {
    let cases = [
        (r#"{"text_input":5}"#, "Unable to parse JSON bytes array: attempt to access JSON non-string as string"),
        (r#"{"words":[1]}"#, "Unable to parse JSON bytes array: attempt to access JSON non-string as string"),
        (r#"{"scale":"abc"}"#, "Unable to parse 'data': attempt to access JSON non-number as double"),
        (r#"{"scale":[1,true]}"#, "Unable to parse 'data': attempt to access JSON non-number as double"),
        (
            r#"{"grid":[1,2,3,1.0]}"#,
            "Unable to parse 'data': attempt to access JSON non-signed-integer as signed-integer",
        ),
        (r#"{"u8":-1}"#, "Unable to parse 'data': attempt to access JSON non-unsigned-integer as unsigned-integer"),
        (r#"{"flag":1}"#, "Unable to parse 'data': attempt to access JSON non-boolean as boolean"),
        (r#"{"scale":[[1,2]]}"#, "Unable to parse 'data': Shape does not match true shape of 'data' field"),
        (
            r#"{"words":[["a","b"]]}"#,
            "[request id: <id_unknown>] unexpected number of string elements 2 for inference input 'words' for \
             model 'm', expecting 1",
        ),
        (
            r#"{"half":[1.5]}"#,
            "receiving FP16 data via JSON is not supported. Please use the binary data format for input half",
        ),
        // tritonserver wraps these silently (300 becomes 44); a client's mistake is refused instead.
        (r#"{"u8":300}"#, "Unable to parse 'data': 300 is out of range for input 'u8' of datatype UINT8"),
    ];
    for (body, want) in cases {
        assert_eq!(invalid(body), want, "{body}");
    }
}

#[test]
fn responses_are_flat_sorted_objects() {
    let resp = InferResponse {
        model_name: "m".into(),
        model_version: 3,
        id: "r9".into(),
        outputs: vec![
            Tensor::new("text_output", DataType::Bytes, vec![1], b"\x03\0\0\0abc".to_vec()),
            Tensor::new("values", DataType::Fp32, vec![2], [1.5f32.to_le_bytes(), 2.0f32.to_le_bytes()].concat()),
            Tensor::new("grid", DataType::Int32, vec![2, 2], [1i32, 2, 3, 4].map(i32::to_le_bytes).concat()),
            Tensor::new("empty", DataType::Int64, vec![0], Vec::new()),
            Tensor::new("one", DataType::Fp32, vec![1, 1], 14.0f32.to_le_bytes().to_vec()),
        ],
        parameters: Parameters::new(),
    };
    assert_eq!(
        String::from_utf8(encode_generate(&resp).unwrap()).unwrap(),
        r#"{"empty":[],"grid":[1,2,3,4],"id":"r9","model_name":"m","model_version":"3","one":14.0,"text_output":"abc","values":[1.5,2.0]}"#
    );
    let anonymous = InferResponse { id: String::new(), outputs: Vec::new(), ..resp };
    assert_eq!(encode_generate(&anonymous).unwrap(), br#"{"model_name":"m","model_version":"3"}"#);
    assert_eq!(encode_generate_error("boom \"x\""), br#"{"error":"boom \"x\""}"#);
}
