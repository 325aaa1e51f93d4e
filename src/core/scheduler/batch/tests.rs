use super::*;
use crate::model_api::types::serialize_bytes;
use crate::model_api::ExecTimings;

fn int_req(rows: &[[i32; 2]], outputs: &[&str]) -> ExecRequest {
    let data: Vec<u8> = rows.iter().flatten().flat_map(|v| v.to_le_bytes()).collect();
    ExecRequest {
        inputs: vec![Tensor::new("IN", DataType::Int32, vec![rows.len() as i64, 2], data)],
        outputs: outputs.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

fn ints(t: &Tensor) -> Vec<i32> {
    t.data.to_host().unwrap().chunks(4).map(|c| i32::from_le_bytes(c.try_into().unwrap())).collect()
}

#[test]
fn merge_concatenates_rows_and_unions_outputs() {
    let a = int_req(&[[1, 2]], &["A"]);
    let b = int_req(&[[3, 4], [5, 6]], &["B", "A"]);
    let m = merge(&[&a, &b], &HashSet::new()).unwrap();
    assert_eq!(m.inputs[0].shape, vec![3, 2]);
    assert_eq!(ints(&m.inputs[0]), vec![1, 2, 3, 4, 5, 6]);
    assert_eq!(m.outputs, vec!["A".to_string(), "B".to_string()]);
}

#[test]
fn compatibility_needs_equal_shapes_unless_ragged() {
    let a = int_req(&[[1, 2]], &["A"]);
    let mut b = int_req(&[[3, 4]], &["A"]);
    assert!(compatible(&a, &b, &HashSet::new()));
    b.inputs[0].shape = vec![1, 3];
    assert!(!compatible(&a, &b, &HashSet::new()));
    assert!(compatible(&a, &b, &HashSet::from(["IN".to_string()])));
    b.inputs[0].datatype = DataType::Fp32;
    assert!(!compatible(&a, &b, &HashSet::from(["IN".to_string()])));
}

#[test]
fn ragged_inputs_become_one_flat_tensor() {
    let a = int_req(&[[1, 2]], &["A"]);
    let mut b = int_req(&[[3, 4]], &["A"]);
    b.inputs[0].shape = vec![1, 1];
    b.inputs[0].data = Bytes::from(7i32.to_le_bytes().to_vec()).into();
    let m = merge(&[&a, &b], &HashSet::from(["IN".to_string()])).unwrap();
    assert_eq!(m.inputs[0].shape, vec![3]);
    assert_eq!(ints(&m.inputs[0]), vec![1, 2, 7]);
}

#[test]
fn split_gives_each_request_its_rows_and_outputs() {
    let a = int_req(&[[0, 0]], &["A"]);
    let b = int_req(&[[0, 0], [0, 0]], &["B", "A"]);
    let out_a = Tensor::new("A", DataType::Int32, vec![3, 1], [10i32, 20, 30].map(i32::to_le_bytes).concat());
    let out_b = Tensor::new("B", DataType::Bytes, vec![3], serialize_bytes([&b"x"[..], b"yy", b"zzz"]));
    let r = ExecResult { outputs: vec![out_a, out_b], timings: ExecTimings::default(), parameters: Default::default() };
    let parts = split(r, &[&a, &b], &[1, 2]).unwrap();
    assert_eq!(parts[0].outputs.len(), 1);
    assert_eq!(ints(&parts[0].outputs[0]), vec![10]);
    assert_eq!(parts[1].outputs[0].name, "B");
    assert_eq!(parts[1].outputs[0].shape, vec![2]);
    let elems = parts[1].outputs[0].data.to_host().unwrap();
    assert_eq!(bytes_elements(&elems).unwrap(), vec![&b"yy"[..], b"zzz"]);
    assert_eq!(ints(&parts[1].outputs[1]), vec![20, 30]);
}

#[test]
fn split_refuses_outputs_without_the_batch_rows() {
    let a = int_req(&[[0, 0]], &["A"]);
    let b = int_req(&[[0, 0]], &["A"]);
    let out = Tensor::new("A", DataType::Int32, vec![1], 5i32.to_le_bytes().to_vec());
    let r = ExecResult { outputs: vec![out], timings: ExecTimings::default(), parameters: Default::default() };
    assert!(split(r, &[&a, &b], &[1, 1]).is_err());
}
