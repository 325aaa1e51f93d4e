//! Unit tests of `tensor/shm.rs`.

use super::*;

fn params(kv: &[(&str, ParamValue)]) -> Parameters {
    kv.iter().map(|(k, v)| (k.to_string(), v.clone())).collect()
}

#[test]
fn parameters_parse_with_tritons_messages() {
    let s = |v: &str| ParamValue::String(v.into());
    assert_eq!(shm_ref(&Parameters::new(), "T").unwrap(), None);
    assert_eq!(
        shm_ref(&params(&[(REGION, s("r")), (BYTE_SIZE, ParamValue::Int(64))]), "T").unwrap(),
        Some(ShmRef { region: "r".into(), offset: 0, byte_size: 64 })
    );
    assert_eq!(
        shm_ref(&params(&[(REGION, s("r")), (BYTE_SIZE, ParamValue::Uint(8)), (OFFSET, ParamValue::Int(4))]), "T")
            .unwrap(),
        Some(ShmRef { region: "r".into(), offset: 4, byte_size: 8 })
    );
    let err = |p: Parameters| shm_ref(&p, "T").unwrap_err();
    let e = err(params(&[(REGION, s("r"))]));
    assert_eq!(
        e.message,
        "'shared_memory_byte_size' must be specified along with 'shared_memory_region' parameter for tensor 'T'"
    );
    let e = err(params(&[(BYTE_SIZE, ParamValue::Int(4))]));
    assert_eq!(
        e.message,
        "'shared_memory_byte_size' can not be specified without 'shared_memory_region' parameter for tensor 'T'"
    );
    for p in [
        params(&[(REGION, ParamValue::Int(5)), (BYTE_SIZE, ParamValue::Int(4))]),
        params(&[(REGION, s("r")), (BYTE_SIZE, ParamValue::Int(-4))]),
        params(&[(REGION, s("r")), (BYTE_SIZE, s("4"))]),
        params(&[(REGION, s("r")), (BYTE_SIZE, ParamValue::Int(4)), (OFFSET, ParamValue::Double(1.0))]),
    ] {
        let e = err(p);
        assert!(e.message.starts_with("invalid value type for 'shared_memory_"), "{e}");
        assert_eq!(e.grpc_code(), 3);
    }
}
