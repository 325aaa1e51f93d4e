//! Unit tests of `backend/tensorrt/ffi.rs`.

use super::*;

#[test]
fn versions_split_as_tensorrt_encodes_them() {
    assert_eq!(split_version(8201), (8, 2, 1));
    assert_eq!(split_version(8601), (8, 6, 1));
    assert_eq!(split_version(100300), (10, 3, 0));
    assert_eq!(split_version(101600), (10, 16, 0));
}

#[test]
fn the_linked_shim_is_tensorrt_10() {
    // CI builds with the TensorRT 10 headers (scripts/test.sh requires it), so the shim is linked and
    // answers; a build without the headers has no shim and says so when a plan is loaded.
    match linked_shim() {
        Some(s) => {
            // SAFETY: an argument-less function of the linked shim.
            let abi = unsafe { (s.abi_version)() };
            // SAFETY: as above.
            let header = unsafe { (s.header_version)() };
            assert_eq!(abi, ABI_VERSION);
            assert_eq!(split_version(header).0, 10);
        }
        None => assert!(std::env::var_os("TRITONRS_REQUIRE_TRT_SHIM").is_none(), "the TensorRT shim was not built"),
    }
}

#[test]
fn missing_libnvinfer_is_a_clear_reason() {
    let opts = LoadOptions { library: Some("/nonexistent/libnvinfer.so.10".into()), ..Default::default() };
    let err = Nvinfer::load(&opts, None).err().expect("no TensorRT here");
    assert!(err.message.contains("TensorRT is not installed"), "{err}");
    assert!(err.message.contains("/nonexistent/libnvinfer.so.10"), "{err}");
}
