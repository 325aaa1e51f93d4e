//! Unit tests of `kserve/encode.rs`.

use super::*;
use crate::tensor::serialize_bytes;

fn json<T: Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap()
}

#[test]
fn data_is_written_as_the_native_type() {
    let f16 = [0.5f32, -1.0].map(|v| half::f16::from_f32(v).to_le_bytes()).concat();
    assert_eq!(json(&JsonData { dt: DataType::Fp16, bytes: &f16 }), "[0.5,-1.0]");
    let f32s = [0.1f32, 2.0].map(f32::to_le_bytes).concat();
    assert_eq!(json(&JsonData { dt: DataType::Fp32, bytes: &f32s }), "[0.1,2.0]", "shortest single precision");
    let u64s = u64::MAX.to_le_bytes();
    assert_eq!(json(&JsonData { dt: DataType::Uint64, bytes: &u64s }), "[18446744073709551615]");
    assert_eq!(json(&JsonData { dt: DataType::Bool, bytes: &[0, 2] }), "[false,true]");
    assert_eq!(json(&JsonData { dt: DataType::Int8, bytes: &[0xfe] }), "[-2]");
    let b = serialize_bytes(["hi", ""]);
    assert_eq!(json(&JsonData { dt: DataType::Bytes, bytes: &b }), r#"["hi",""]"#);
    assert!(serde_json::to_string(&JsonData { dt: DataType::Bytes, bytes: &[9, 0] }).is_err());
    let nan = f32::NAN.to_le_bytes();
    assert_eq!(json(&JsonData { dt: DataType::Fp32, bytes: &nan }), "[null]");
}

#[test]
fn outputs_in_both_key_orders_with_a_binary_tail() {
    let a = Tensor::new("A", DataType::Int32, vec![2], [1i32, 2].map(i32::to_le_bytes).concat());
    let mut b = Tensor::new("B", DataType::Uint8, vec![3], vec![7u8, 8, 9]);
    b.parameters.insert("note".into(), ParamValue::String("x".into()));
    let outputs = [a, b];
    let prepared = Outputs::new(&outputs, |n| n == "B").unwrap();
    assert_eq!(
        json(&prepared.json(KeyOrder::KServe)),
        r#"[{"name":"A","datatype":"INT32","shape":[2],"data":[1,2]},{"name":"B","datatype":"UINT8","shape":[3],"parameters":{"binary_data_size":3,"note":"x"}}]"#
    );
    assert_eq!(
        json(&prepared.json(KeyOrder::Sorted)),
        r#"[{"data":[1,2],"datatype":"INT32","name":"A","shape":[2]},{"datatype":"UINT8","name":"B","parameters":{"binary_data_size":3,"note":"x"},"shape":[3]}]"#
    );
    assert_eq!(prepared.binary_tail().as_deref(), Some(&[7u8, 8, 9][..]));
    assert_eq!(prepared.binary_len(), 3);
    let none = Outputs::new(&outputs, |_| false).unwrap();
    assert!(none.binary_tail().is_none());
    let both = Outputs::new(&outputs, |_| true).unwrap();
    assert_eq!(both.binary_tail().as_deref(), Some(&[1u8, 0, 0, 0, 2, 0, 0, 0, 7, 8, 9][..]));
}

#[test]
fn response_json_and_binary() {
    let resp = InferResponse {
        model_name: "m".into(),
        model_version: 3,
        id: "x".into(),
        outputs: vec![
            Tensor::new(
                "A",
                DataType::Int32,
                vec![2],
                [5i32, -6].iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<_>>(),
            ),
            Tensor::new("S", DataType::Bytes, vec![1], serialize_bytes(["hey"])),
        ],
        parameters: Parameters::new(),
    };
    let json = encode_response(&resp, |_| false).unwrap();
    assert_eq!(json.header_len, None);
    let v: serde_json::Value = serde_json::from_slice(&json.body).unwrap();
    assert_eq!(
        v,
        serde_json::json!({"model_name":"m","model_version":"3","id":"x","outputs":[
                {"name":"A","datatype":"INT32","shape":[2],"data":[5,-6]},
                {"name":"S","datatype":"BYTES","shape":[1],"data":["hey"]}]})
    );
    let bin = encode_response(&resp, |n| n == "A").unwrap();
    let n = bin.header_len.unwrap();
    let v: serde_json::Value = serde_json::from_slice(&bin.body[..n]).unwrap();
    assert_eq!(v["outputs"][0]["parameters"]["binary_data_size"], 8);
    assert!(v["outputs"][0].get("data").is_none());
    assert_eq!(&bin.body[n..], &[5, 0, 0, 0, 0xfa, 0xff, 0xff, 0xff]);
}
