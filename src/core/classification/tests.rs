//! Unit tests of `core/classification.rs`.

use super::*;
use crate::model_api::types::bytes_elements;

fn f32_tensor(shape: Vec<i64>, v: &[f32]) -> Tensor {
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    Tensor::new("OUT", DataType::Fp32, shape, bytes)
}

fn strings(t: &Tensor) -> Vec<String> {
    bytes_elements(t.data.as_host().unwrap()).unwrap().iter().map(|b| String::from_utf8(b.to_vec()).unwrap()).collect()
}

#[test]
fn top_k_with_labels_per_batch_row() {
    let t = f32_tensor(vec![2, 3], &[0.1, 0.7, 0.2, 5.0, 1.0, 5.0]);
    let labels = vec!["a".to_string(), "b".into(), "c".into()];
    let c = classify(&t, 2, true, Some(&labels)).unwrap();
    assert_eq!(c.shape, vec![2, 2]);
    assert_eq!(strings(&c), vec!["0.700000:1:b", "0.200000:2:c", "5.000000:0:a", "5.000000:2:c"]);
}

#[test]
fn integers_without_labels_and_k_clamped() {
    let bytes: Vec<u8> = [3i32, 9, 1].iter().flat_map(|x| x.to_le_bytes()).collect();
    let t = Tensor::new("OUT", DataType::Int32, vec![3], bytes);
    let c = classify(&t, 10, false, None).unwrap();
    assert_eq!(c.shape, vec![3]);
    assert_eq!(strings(&c), vec!["9:1", "3:0", "1:2"]);
}
