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
    let m = merge(&[&a, &b], &BatchSpec::default()).unwrap();
    assert_eq!(m.inputs[0].shape, vec![3, 2]);
    assert_eq!(ints(&m.inputs[0]), vec![1, 2, 3, 4, 5, 6]);
    assert_eq!(m.outputs, vec!["A".to_string(), "B".to_string()]);
}

#[test]
fn compatibility_needs_equal_shapes_unless_ragged() {
    let a = int_req(&[[1, 2]], &["A"]);
    let mut b = int_req(&[[3, 4]], &["A"]);
    assert!(compatible(&a, &b, &BatchSpec::default()));
    b.inputs[0].shape = vec![1, 3];
    assert!(!compatible(&a, &b, &BatchSpec::default()));
    assert!(compatible(&a, &b, &BatchSpec::ragged(["IN"])));
    b.inputs[0].datatype = DataType::Fp32;
    assert!(!compatible(&a, &b, &BatchSpec::ragged(["IN"])));
}

#[test]
fn ragged_inputs_become_one_flat_tensor() {
    let a = int_req(&[[1, 2]], &["A"]);
    let mut b = int_req(&[[3, 4]], &["A"]);
    b.inputs[0].shape = vec![1, 1];
    b.inputs[0].data = Bytes::from(7i32.to_le_bytes().to_vec()).into();
    let m = merge(&[&a, &b], &BatchSpec::ragged(["IN"])).unwrap();
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
    let parts = split(r, &[&a, &b], &[1, 2], &BatchSpec::default()).unwrap();
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
    assert!(split(r, &[&a, &b], &[1, 1], &BatchSpec::default()).is_err());
}

/// A request of batch size `rows.len()` whose ragged input `IN` holds `rows` (all the same length).
fn ragged_req(rows: usize, len: usize) -> ExecRequest {
    let data: Vec<u8> = (0..rows * len).flat_map(|v| (v as f32).to_le_bytes()).collect();
    ExecRequest {
        inputs: vec![Tensor::new("IN", DataType::Fp32, vec![rows as i64, len as i64], data)],
        outputs: vec!["OUT".into()],
        ..Default::default()
    }
}

fn spec_with(kinds: &[(batch_input::Kind, &str, DataType)]) -> BatchSpec {
    let mut spec = BatchSpec::ragged(["IN"]);
    for &(kind, target, dt) in kinds {
        spec.inputs.push(BatchInput {
            kind: kind as i32,
            target_name: vec![target.into()],
            data_type: dt.to_config(),
            source_input: vec!["IN".into()],
        });
    }
    spec
}

fn floats(t: &Tensor) -> Vec<f32> {
    t.data.to_host().unwrap().chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
}

#[test]
fn batch_inputs_describe_the_requests_as_tritons_backends_do() {
    use batch_input::Kind::*;
    let spec = spec_with(&[
        (BatchElementCount, "C", DataType::Int32),
        (BatchAccumulatedElementCount, "A", DataType::Int32),
        (BatchAccumulatedElementCountWithZero, "Z", DataType::Fp32),
        (BatchMaxElementCountAsShape, "M", DataType::Int32),
        (BatchItemShape, "S", DataType::Int32),
        (BatchItemShapeFlatten, "F", DataType::Int32),
    ]);
    // Element counts include the batch dimension: 2 x 3 = 6, then 1 x 4 = 4.
    let (a, b) = (ragged_req(2, 3), ragged_req(1, 4));
    let m = merge(&[&a, &b], &spec).unwrap();
    let get = |n: &str| m.inputs.iter().find(|t| t.name == n).unwrap();
    assert_eq!((get("IN").shape.clone(), get("IN").element_count()), (vec![10], 10));
    assert_eq!((get("C").shape.clone(), ints(get("C"))), (vec![2], vec![6, 4]));
    assert_eq!((get("A").shape.clone(), ints(get("A"))), (vec![2], vec![6, 10]));
    assert_eq!((get("Z").shape.clone(), floats(get("Z"))), (vec![3], vec![0.0, 6.0, 10.0]));
    assert_eq!(get("M").shape, vec![6]);
    // One row of dims (after the batch dimension) per batch item.
    assert_eq!((get("S").shape.clone(), ints(get("S"))), (vec![3, 1], vec![3, 3, 4]));
    assert_eq!((get("F").shape.clone(), ints(get("F"))), (vec![3], vec![3, 3, 4]));
}

#[test]
fn a_single_request_is_flattened_and_gets_its_batch_inputs() {
    let spec = spec_with(&[(batch_input::Kind::BatchElementCount, "C", DataType::Int32)]);
    let a = ragged_req(1, 5);
    let m = merge(&[&a], &spec).unwrap();
    assert_eq!(m.inputs[0].shape, vec![5]);
    assert_eq!(ints(&m.inputs[1]), vec![5]);
}

#[test]
fn batch_input_fails_when_a_request_lacks_its_source() {
    let spec = spec_with(&[(batch_input::Kind::BatchElementCount, "C", DataType::Int32)]);
    let mut a = ragged_req(1, 2);
    a.inputs[0].name = "OTHER".into();
    let e = merge(&[&a], &spec).unwrap_err();
    assert!(e.message.contains("'IN'"), "{e:?}");
}

#[test]
fn scattered_outputs_take_each_requests_input_shape() {
    let mut spec = BatchSpec::ragged(["IN"]);
    spec.outputs.push(BatchOutput { target_name: vec!["OUT".into()], kind: 0, source_input: vec!["IN".into()] });
    let (a, b) = (ragged_req(2, 3), ragged_req(1, 4));
    let out = Tensor::new(
        "OUT",
        DataType::Fp32,
        vec![10],
        (0..10).flat_map(|v| (v as f32).to_le_bytes()).collect::<Vec<u8>>(),
    );
    let r = ExecResult { outputs: vec![out], timings: ExecTimings::default(), parameters: Default::default() };
    let parts = split(r, &[&a, &b], &[2, 1], &spec).unwrap();
    assert_eq!(parts[0].outputs[0].shape, vec![2, 3]);
    assert_eq!(floats(&parts[0].outputs[0]), vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
    assert_eq!(parts[1].outputs[0].shape, vec![1, 4]);
    assert_eq!(floats(&parts[1].outputs[0]), vec![6.0, 7.0, 8.0, 9.0]);
    // Too few elements for the shapes is an error, not a panic.
    let short = Tensor::new("OUT", DataType::Fp32, vec![3], vec![0u8; 12]);
    let r = ExecResult { outputs: vec![short], timings: ExecTimings::default(), parameters: Default::default() };
    assert!(split(r, &[&a, &b], &[2, 1], &spec).is_err());
}
