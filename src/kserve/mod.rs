//! The KServe v2 codec: requests decoded from, and responses and outputs encoded to, the JSON form with
//! Triton's binary tensor data extension, and the `{"error": ...}` body. Transport-neutral (bytes in,
//! bytes or JSON out; no HTTP types), so the HTTP and MQTT front-ends, DeepStack, the vision pipeline,
//! the benches and the fuzz targets share one codec. `generate` maps Triton's generate extension (flat
//! JSON objects) to the same request and response types. It sits above `tensor` and `model_api`, whose
//! request and response types it reads and writes; no front-end is below it.

pub mod decode;
pub mod encode;
pub mod generate;

pub use decode::{decode_request, json_params, parse_json_data, raw_input, BinaryOutputs, DecodedRequest};
pub use encode::{encode_response, EncodedResponse, JsonData, JsonParams, KeyOrder, Outputs, OutputsJson};

use serde_json::{Map, Value};

/// The KServe v2 error body, `{"error": message}`; a caller answering in a protocol of its own (DeepStack)
/// adds its fields to it.
pub fn error_body(message: &str) -> Map<String, Value> {
    let mut body = Map::new();
    body.insert("error".into(), Value::String(message.to_string()));
    body
}

#[cfg(test)]
mod tests;
