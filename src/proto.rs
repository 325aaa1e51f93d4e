//! Protobuf types generated from proto/ and the runtime descriptors used to reflect on them.

use std::sync::LazyLock;

use prost_reflect::{DescriptorPool, MessageDescriptor};

/// Triton's `inference` protobuf package: model configuration and the gRPC API
/// (`grpc_inference_service_server`).
#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod inference {
    include!(concat!(env!("OUT_DIR"), "/inference.rs"));
}

/// Encoded `FileDescriptorSet` of every compiled .proto file, written by build.rs.
pub static FILE_DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/file_descriptor_set.bin"));

/// Descriptors of all compiled messages, for text-format and JSON conversion by reflection.
pub static DESCRIPTOR_POOL: LazyLock<DescriptorPool> = LazyLock::new(|| {
    DescriptorPool::decode(FILE_DESCRIPTOR_SET)
        .expect("descriptor set embedded by build.rs does not decode; this is a bug")
});

/// Full protobuf name of Triton's model configuration message.
pub const MODEL_CONFIG_MESSAGE: &str = "inference.ModelConfig";

/// Descriptor of `inference.ModelConfig`.
pub fn model_config_descriptor() -> MessageDescriptor {
    DESCRIPTOR_POOL
        .get_message_by_name(MODEL_CONFIG_MESSAGE)
        .expect("inference.ModelConfig missing from the embedded descriptors; this is a bug")
}

/// The part of ONNX's `ModelProto` read for auto-complete (proto/onnx_model_io.proto).
#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod onnx {
    include!(concat!(env!("OUT_DIR"), "/onnx.rs"));
}
