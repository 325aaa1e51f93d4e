//! Front-ends: each decodes its transport into core types once, calls `core::Server`, and encodes the
//! answer once.

pub mod conn;
pub mod forward;
pub mod frigate;
pub mod grpc;
pub mod http;
pub mod metrics;
pub mod mqtt;
pub mod restrict;
pub mod tls;

/// Decodes a generate-extension body (`kserve::generate`) for `name` (version `version`) against the
/// inputs its metadata lists: shared by the HTTP routes and the MQTT generate topics. An unknown model
/// or version is not found.
pub fn decode_generate_request(
    server: &crate::core::Server,
    name: &str,
    version: Option<i64>,
    body: &[u8],
) -> crate::error::Result<crate::model_api::types::InferRequest> {
    use crate::kserve::generate::{decode_generate, GenerateInput};
    use crate::model_api::types::DataType;
    let meta = server.model_metadata(name, &version.map(|v| v.to_string()).unwrap_or_default())?;
    let inputs = meta
        .inputs
        .into_iter()
        .map(|t| {
            let datatype = DataType::parse(&t.datatype)
                .ok_or_else(|| crate::error::Error::internal(format!("input '{}' has no datatype", t.name)))?;
            Ok(GenerateInput { name: t.name, datatype, shape: t.shape })
        })
        .collect::<crate::error::Result<Vec<_>>>()?;
    decode_generate(body, name, version, &inputs)
}
