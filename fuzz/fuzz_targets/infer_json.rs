//! KServe v2 JSON inference request bodies (no binary data part): `decode_request` must never
//! panic, whatever the body.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tritonrs::kserve::decode_request;

fuzz_target!(|data: &[u8]| {
    let _ = decode_request(bytes::Bytes::copy_from_slice(data), None, "m", None);
});
