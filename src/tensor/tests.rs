//! Unit tests of `tensor/mod.rs`.

use super::*;

#[test]
fn element_count_handles_overflow_and_negatives() {
    assert_eq!(element_count(&[2, 3]), Some(6));
    assert_eq!(element_count(&[]), Some(1));
    assert_eq!(element_count(&[-1, 3]), None);
    assert_eq!(element_count(&[i64::MAX, i64::MAX]), None);
}

#[test]
fn byte_len_is_count_times_size() {
    assert_eq!(byte_len(DataType::Fp32, &[2, 3]), Some(24));
    assert_eq!(byte_len(DataType::Bytes, &[2]), None);
    assert_eq!(byte_len(DataType::Int64, &[-1]), None);
}
