//! Triton's binary tensor data extension: a JSON header of `Inference-Header-Content-Length`
//! bytes followed by raw tensor data. The first two input bytes (a little-endian u16 `n`) pick
//! the header length `n % (body.len() + 1)`, so it always lies within the body; the rest of the
//! input is the body. The body is also fed to the BYTES element splitter. Neither may panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tritonrs::model_api::types::bytes_elements;
use tritonrs::kserve::decode_request;

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let n = usize::from(u16::from_le_bytes([data[0], data[1]]));
    let body = &data[2..];
    let header_len = n % (body.len() + 1);
    let _ = decode_request(bytes::Bytes::copy_from_slice(body), Some(header_len), "m", None);
    let _ = bytes_elements(body);
});
