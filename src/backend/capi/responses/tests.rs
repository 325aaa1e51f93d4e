//! Unit tests of `backend/capi/responses.rs`.

use super::*;
use crate::model_api::types::DataType;

fn output(datatype: DataType, shape: &[i64], buffer: Option<&[u8]>) -> OutputObj {
    OutputObj {
        name: "OUT".into(),
        c_name: cstring("OUT"),
        datatype,
        shape: shape.to_vec(),
        buffer: buffer.map(<[u8]>::to_vec),
        attributes: BufferAttributesObj::host(0),
    }
}

#[test]
fn outputs_must_match_the_shape_and_datatype_their_backend_declared() {
    assert_eq!(check_output(&output(DataType::Fp32, &[2, 2], Some(&[0; 16]))), Ok(()));
    // An empty tensor needs no buffer; any other does.
    assert_eq!(check_output(&output(DataType::Fp32, &[0, 4], None)), Ok(()));
    let e = check_output(&output(DataType::Int64, &[3], None)).unwrap_err();
    assert!(e.contains("without a buffer"), "{e}");
    let e = check_output(&output(DataType::Fp32, &[2, 2], Some(&[0; 15]))).unwrap_err();
    assert!(e.contains("with 15 bytes where its shape needs 16"), "{e}");
    let e = check_output(&output(DataType::Fp32, &[-1, 2], Some(&[]))).unwrap_err();
    assert!(e.contains("negative dimension"), "{e}");
    // The element count fits, its byte size does not.
    let e = check_output(&output(DataType::Fp64, &[1 << 62], Some(&[]))).unwrap_err();
    assert!(e.contains("too many elements"), "{e}");
    let e = check_output(&output(DataType::Fp32, &[i64::MAX, i64::MAX], None)).unwrap_err();
    assert!(e.contains("too many elements"), "{e}");
}

#[test]
fn bytes_outputs_must_hold_as_many_well_formed_elements_as_their_shape() {
    let two = crate::tensor::serialize_bytes([&b"ab"[..], &b""[..]]);
    assert_eq!(check_output(&output(DataType::Bytes, &[2], Some(&two))), Ok(()));
    let e = check_output(&output(DataType::Bytes, &[3], Some(&two))).unwrap_err();
    assert!(e.contains("holding 2 element(s) where its shape needs 3"), "{e}");
    let e = check_output(&output(DataType::Bytes, &[1], Some(&[9, 0, 0, 0, b'x']))).unwrap_err();
    assert!(e.contains("not a list of length-prefixed elements"), "{e}");
    let e = check_output(&output(DataType::Bytes, &[1], Some(&[1, 0]))).unwrap_err();
    assert!(e.contains("not a list of length-prefixed elements"), "{e}");
}
