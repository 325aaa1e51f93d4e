//! Unit tests of `tensor/view.rs`.

use super::*;

#[test]
fn bytes_serialization_round_trips_and_rejects_truncation() {
    let buf = serialize_bytes(["ab", "", "xyz"]);
    assert_eq!(&buf[..], b"\x02\0\0\0ab\0\0\0\0\x03\0\0\0xyz");
    let parts = bytes_elements(&buf).unwrap();
    assert_eq!(parts, vec![&b"ab"[..], b"", b"xyz"]);
    assert!(bytes_elements(&buf[..buf.len() - 1]).is_err());
    assert!(bytes_elements(b"\x01\0").is_err());
}

#[test]
fn numbers_read_every_number_type() {
    let t = Tensor::new(
        "t",
        DataType::Fp16,
        vec![2],
        [1.5f32, -2.0].map(|v| half::f16::from_f32(v).to_le_bytes()).concat(),
    );
    assert_eq!(numbers(&t).unwrap(), vec![1.5, -2.0]);
    let t = Tensor::new("t", DataType::Uint64, vec![1], (1u64 << 53).to_le_bytes().to_vec());
    assert_eq!(numbers(&t).unwrap(), vec![9007199254740992.0]);
    let t = Tensor::new("t", DataType::Int8, vec![2], vec![0xff, 3]);
    assert_eq!(numbers(&t).unwrap(), vec![-1.0, 3.0]);
    let t = Tensor::new("t", DataType::Bool, vec![2], vec![0, 7]);
    assert_eq!(numbers(&t).unwrap(), vec![0.0, 1.0]);
    assert!(numbers(&Tensor::new("t", DataType::Int32, vec![2], vec![0u8; 4])).is_err(), "too few bytes");
    assert!(numbers(&Tensor::new("t", DataType::Bytes, vec![1], serialize_bytes(["a"]))).is_err());
}

#[test]
fn push_float_rounds_to_the_type_and_refuses_integers() {
    let mut out = Vec::new();
    assert!(push_float(DataType::Fp16, 0.5, &mut out));
    assert!(push_float(DataType::Fp32, 0.25, &mut out));
    assert!(!push_float(DataType::Int32, 1.0, &mut out));
    assert_eq!(out.len(), 6);
    let mut back = Vec::new();
    for_each_f64(DataType::Fp16, &out[..2], |v| back.push(v));
    for_each_f64(DataType::Fp32, &out[2..], |v| back.push(v));
    assert_eq!(back, vec![0.5, 0.25]);
}

#[test]
fn top_k_orders_by_value_then_index_with_nan_last() {
    let v = [0.1f32, 0.7, 0.7, f32::NAN, 0.3];
    assert_eq!(top_k(&v, 3, |_| true), vec![1, 2, 4]);
    assert_eq!(top_k(&v, 10, |_| true), vec![1, 2, 4, 0, 3]);
    assert_eq!(top_k(&v, 10, |x| !x.is_nan() && x >= 0.3), vec![1, 2, 4]);
    assert_eq!(top_k(&v, 0, |_| true), Vec::<usize>::new());
    assert_eq!(top_k(&[3.0f64, 9.0, 1.0], 1, |_| true), vec![1]);
}
