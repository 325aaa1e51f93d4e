//! Compiles every protobuf schema in proto/ into Rust types and an embedded descriptor set.

// protox is a pure-Rust protobuf compiler, so no `protoc` binary is needed on any build host
// (cross builds for aarch64 included). Each protobuf package becomes `$OUT_DIR/<package>.rs`
// (`inference.rs`, `onnx.rs`, ...), included by src/proto.rs.

use std::env;
use std::error::Error;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// Directory holding the .proto sources, relative to the crate root; also the import root.
const PROTO_DIR: &str = "proto";

fn main() -> Result<(), Box<dyn Error>> {
    // A directory makes cargo rerun when any file in it changes, is added or is removed.
    println!("cargo:rerun-if-changed={PROTO_DIR}");
    println!("cargo:rerun-if-changed=build.rs");

    let proto_dir = Path::new(PROTO_DIR);
    let files = proto_files(proto_dir)?;
    let out_dir = PathBuf::from(env::var("OUT_DIR")?);

    let mut compiler = protox::Compiler::new([proto_dir])?;
    compiler.include_imports(true);
    // Source info carries the .proto comments into the generated code's docs.
    compiler.include_source_info(true);
    compiler.open_files(&files)?;
    let fds = compiler.file_descriptor_set();

    // The embedded copy is only used for reflection (text format, JSON), so leave the
    // comments out to keep the binary small.
    compiler.include_source_info(false);
    fs::write(out_dir.join("file_descriptor_set.bin"), compiler.encode_file_descriptor_set())?;

    // tonic's generator emits the message types (through prost-build) and the gRPC service stubs in
    // one pass over the same descriptors. Only servers are generated; raw tensor contents are
    // `bytes::Bytes` so a request's tensors can share the decoded message's buffers.
    tonic_prost_build::configure()
        .build_client(false)
        .build_transport(false)
        .out_dir(&out_dir)
        .bytes(".inference.ModelInferRequest.raw_input_contents")
        .bytes(".inference.ModelInferResponse.raw_output_contents")
        .compile_fds(fds)?;

    Ok(())
}

/// Every `.proto` file directly in `dir`, sorted so the output does not depend on directory
/// listing order.
fn proto_files(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_file() && path.extension().is_some_and(|ext| ext == "proto") {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}
