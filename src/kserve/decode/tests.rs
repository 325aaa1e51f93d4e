use super::*;
use crate::error::ErrorKind;
use crate::model_api::types::serialize_bytes;

fn decode(body: &[u8], header: Option<usize>) -> Result<DecodedRequest> {
    decode_request(Bytes::copy_from_slice(body), header, "m", Some(1))
}

fn invalid(r: Result<DecodedRequest>) -> String {
    let e = r.unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArgument, "{}", e.message);
    e.message
}

#[test]
fn json_data_flat_and_nested() {
    let d = decode(
        br#"{"id":"r1","inputs":[{"name":"A","shape":[2,2],"datatype":"INT32","data":[[1,2],[3,-4]]},
            {"name":"B","shape":[3],"datatype":"FP32","data":[1.5,2,-0.25]},
            {"name":"C","shape":[2],"datatype":"BOOL","data":[true,false]},
            {"name":"D","shape":[2],"datatype":"BYTES","data":["hi",""]},
            {"name":"E","shape":[1],"datatype":"FP16","data":[0.5]}],
           "outputs":[{"name":"X","parameters":{"classification":3,"binary_data":true}}],
           "parameters":{"binary_data_output":false,"priority":2}}"#,
        None,
    )
    .unwrap();
    let r = &d.request;
    assert_eq!(r.id, "r1");
    assert_eq!(r.model_version, Some(1));
    let host = |i: usize| r.inputs[i].data.as_host().unwrap().to_vec();
    assert_eq!(host(0), [1i32, 2, 3, -4].iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<_>>());
    assert_eq!(host(1), [1.5f32, 2.0, -0.25].iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<_>>());
    assert_eq!(host(2), vec![1, 0]);
    assert_eq!(host(3), serialize_bytes(["hi", ""]).to_vec());
    assert_eq!(host(4), half::f16::from_f32(0.5).to_le_bytes().to_vec());
    assert_eq!(r.outputs[0].class_count, 3);
    assert!(d.output_is_binary("X"));
    assert!(!d.output_is_binary("Y"));
    assert_eq!(r.parameters.get("priority"), Some(&ParamValue::Int(2)));
}

#[test]
fn binary_extension_slices_the_body_without_copying() {
    let header = br#"{"inputs":[{"name":"A","shape":[2],"datatype":"INT32","parameters":{"binary_data_size":8}},
        {"name":"B","shape":[1],"datatype":"INT32","data":[7]}],"parameters":{"binary_data_output":true}}"#;
    let mut body = header.to_vec();
    body.extend_from_slice(&[1, 0, 0, 0, 2, 0, 0, 0]);
    let bytes = Bytes::from(body);
    let d = decode_request(bytes.clone(), Some(header.len()), "m", None).unwrap();
    let a = d.request.inputs[0].data.as_host().unwrap();
    assert_eq!(&a[..], &[1, 0, 0, 0, 2, 0, 0, 0]);
    // Zero copy: the input's bytes point into the request body.
    assert_eq!(a.as_ptr(), bytes[header.len()..].as_ptr());
    assert!(d.binary_default);
    assert!(d.output_is_binary("anything"));
}

#[test]
fn malformed_requests_are_invalid_argument() {
    assert!(invalid(decode(b"{bad", None)).contains("failed to parse"));
    assert!(invalid(decode(br#"{"inputs":[{"name":"A","shape":[3],"datatype":"INT32","data":[1,2]}]}"#, None))
        .contains("holds 2 elements"));
    assert!(invalid(decode(br#"{"inputs":[{"name":"A","shape":[1],"datatype":"INT32","data":["x"]}]}"#, None))
        .contains("got a string"));
    assert!(invalid(decode(br#"{"inputs":[{"name":"A","shape":[1],"datatype":"UINT8","data":[300]}]}"#, None))
        .contains("out of range"));
    assert!(invalid(decode(br#"{"inputs":[{"name":"A","shape":[1],"datatype":"INT32","data":[1.5]}]}"#, None))
        .contains("got 1.5"));
    assert!(invalid(decode(br#"{"inputs":[{"name":"A","shape":[1],"datatype":"FLOAT","data":[1]}]}"#, None))
        .contains("unknown datatype"));
    assert!(invalid(decode(br#"{"inputs":[{"name":"A","shape":[1],"datatype":"INT32"}]}"#, None)).contains("no data"));
    assert!(invalid(decode(br#"{"inputs":[{"name":"A","shape":[-1],"datatype":"INT32","data":[]}]}"#, None))
        .contains("invalid shape"));
    let h = br#"{"inputs":[{"name":"A","shape":[2],"datatype":"INT32","parameters":{"binary_data_size":8}}]}"#;
    let mut short = h.to_vec();
    short.extend_from_slice(&[0; 4]);
    assert!(invalid(decode(&short, Some(h.len()))).contains("only 4 more bytes"));
    let mut extra = h.to_vec();
    extra.extend_from_slice(&[0; 12]);
    assert!(invalid(decode(&extra, Some(h.len()))).contains("no input claims"));
    assert!(invalid(decode(h, Some(h.len() + 1))).contains("larger than the request body"));
    let e = decode(
        br#"{"inputs":[{"name":"A","shape":[1],"datatype":"INT32","parameters":{"shared_memory_region":"r"}}]}"#,
        None,
    )
    .unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArgument);
    assert!(e.message.contains("'shared_memory_byte_size' must be specified"), "{e}");
    let e = decode(
        br#"{"inputs":[{"name":"A","shape":[1],"datatype":"INT32","data":[1],"parameters":{"shared_memory_region":"r","shared_memory_byte_size":4}}]}"#,
        None,
    )
    .unwrap_err();
    assert!(e.message.starts_with("Input must set only one of the following fields"), "{e}");
    // A request that names a region carries no data of its own; the core reads the region.
    let ok = decode(
        br#"{"inputs":[{"name":"A","shape":[1],"datatype":"INT32","parameters":{"shared_memory_region":"r","shared_memory_byte_size":4}}],"outputs":[{"name":"B","parameters":{"shared_memory_region":"o","shared_memory_byte_size":4}}]}"#,
        None,
    )
    .unwrap();
    assert!(ok.request.inputs[0].data.is_empty());
    assert!(ok.request.inputs[0].parameters.contains_key("shared_memory_region"));
    assert!(ok.request.outputs[0].parameters.contains_key("shared_memory_region"));
}

#[test]
fn raw_body_shape_is_deduced() {
    let body = Bytes::from(vec![0u8; 12]);
    let t = raw_input(body.clone(), "IN", DataType::Fp32, &[-1], true).unwrap();
    assert_eq!(t.shape, vec![1, 3]);
    let t = raw_input(body.clone(), "IN", DataType::Fp32, &[3], false).unwrap();
    assert_eq!(t.shape, vec![3]);
    assert!(raw_input(body.clone(), "IN", DataType::Fp64, &[-1], true).is_err());
    assert!(raw_input(body, "IN", DataType::Fp32, &[-1, -1], true).is_err());
    let s = raw_input(serialize_bytes(["a", "b"]), "IN", DataType::Bytes, &[-1], false).unwrap();
    assert_eq!(s.shape, vec![2]);
}
