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

    // Triton backend libraries call back into the server through TRITONSERVER_* / TRITONBACKEND_*
    // functions they resolve at load time: the executable exports exactly those (a dynamic list, so
    // nothing else leaks into its dynamic symbol table).
    // zig's linker (cargo-zigbuild, the glibc-2.27 release builds) accepts no symbol list: those
    // binaries export nothing, and the C API host says so when a model needs it.
    let exports = PathBuf::from(env::var("CARGO_MANIFEST_DIR")?).join("src/backend/capi/exports.list");
    println!("cargo:rerun-if-changed={}", exports.display());
    println!("cargo:rerun-if-env-changed=RUSTC_LINKER");
    let zig = env::var("RUSTC_LINKER").is_ok_and(|l| l.contains("zig"));
    if env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") && !zig {
        println!("cargo:rustc-link-arg-bins=-Wl,--dynamic-list={}", exports.display());
    }
    libtritonserver(&exports)?;

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
    // one pass over the same descriptors: the server, and the client `tritonrs tune --via` drives a
    // running server with (no transport helpers: it brings its own HTTP/2 connection). Raw tensor
    // contents are `bytes::Bytes` so a request's tensors can share the decoded message's buffers.
    tonic_prost_build::configure()
        .build_client(true)
        .build_transport(false)
        .out_dir(&out_dir)
        .bytes(".inference.ModelInferRequest.raw_input_contents")
        .bytes(".inference.ModelInferResponse.raw_output_contents")
        .compile_fds(fds)?;

    tensorrt_shim()?;
    Ok(())
}

/// The API functions of `exports.list`, in its (sorted) order.
fn export_names(list: &Path) -> Result<Vec<String>, Box<dyn Error>> {
    let text = fs::read_to_string(list)?;
    let body = text.split('{').nth(1).unwrap_or_default();
    Ok(body.split(';').map(str::trim).filter(|s| s.starts_with("TRITON")).map(String::from).collect())
}

/// `libtritonserver.so`, the library Triton backends name as NEEDED: one trampoline per API function,
/// each jumping through a table that tritonrs fills with its own functions when it loads the library
/// (RTLD_GLOBAL) before the first backend. So backends link against it as against tritonserver's, and
/// a tritonrs binary whose linker could not export the functions (zig) still serves them.
/// Written to `$OUT_DIR/capi_table.rs` (the Rust side of the table) and, built with the target's C
/// compiler, next to the binary (`target/<profile>/libtritonserver.so`); without a C compiler the
/// build goes on without it and says so.
fn libtritonserver(list: &Path) -> Result<(), Box<dyn Error>> {
    let names = export_names(list)?;
    let out_dir = PathBuf::from(env::var("OUT_DIR")?);
    let mut table = String::from("/// Every exported API function, in the order of the forwarding library's table.\n");
    table.push_str("pub fn exports() -> Vec<(&'static str, usize)> {\n    vec![\n");
    for n in &names {
        table.push_str(&format!("    (\"{n}\", {n} as *const () as usize),\n"));
    }
    table.push_str("    ]\n}\n");
    fs::write(out_dir.join("capi_table.rs"), table)?;

    let arch = env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let jump = |i: usize| match arch.as_str() {
        "x86_64" => Some(format!("    jmp *.Ltable+{}(%rip)\n", 8 * i)),
        "aarch64" => {
            Some(format!("    adrp x16, .Ltable+{o}\n    ldr x16, [x16, #:lo12:.Ltable+{o}]\n    br x16\n", o = 8 * i))
        }
        _ => None,
    };
    if env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("linux") || jump(0).is_none() {
        return Ok(());
    }
    let mut asm = String::from("    .text\n");
    for (i, n) in names.iter().enumerate() {
        asm.push_str(&format!("    .globl {n}\n    .type {n}, %function\n    .p2align 4\n{n}:\n"));
        asm.push_str(&jump(i).unwrap_or_default());
        asm.push_str(&format!("    .size {n}, .-{n}\n"));
    }
    asm.push_str("    .data\n    .p2align 3\n    .globl tritonrs_table\n    .type tritonrs_table, %object\n");
    asm.push_str(&format!(
        "tritonrs_table:\n.Ltable:\n    .zero {}\n    .size tritonrs_table, {}\n",
        8 * names.len(),
        8 * names.len()
    ));
    asm.push_str("    .section .rodata\n    .globl tritonrs_table_names\n    .type tritonrs_table_names, %object\n");
    let joined = names.join(",");
    asm.push_str(&format!(
        "tritonrs_table_names:\n    .asciz \"{joined}\"\n    .size tritonrs_table_names, {}\n",
        joined.len() + 1
    ));
    asm.push_str("    .section .note.GNU-stack,\"\",%progbits\n");
    let src = out_dir.join("libtritonserver.S");
    fs::write(&src, asm)?;
    let lib = out_dir.join("libtritonserver.so");
    let compiler = cc::Build::new().get_compiler();
    let status = compiler
        .to_command()
        .args(["-shared", "-nostdlib", "-fPIC", "-Wl,-soname,libtritonserver.so", "-o"])
        .arg(&lib)
        .arg(&src)
        .status();
    match status {
        Ok(s) if s.success() => {
            // OUT_DIR is target/[<triple>/]<profile>/build/<pkg>-<hash>/out: the binary's folder is 3 up.
            if let Some(bin_dir) = out_dir.ancestors().nth(3) {
                fs::copy(&lib, bin_dir.join("libtritonserver.so"))?;
            }
        }
        other => println!(
            "cargo:warning=libtritonserver.so not built ({other:?}): C backends that list it as NEEDED need it \
             installed (see README)"
        ),
    }
    Ok(())
}

/// The crate whose files hold the TensorRT 10 headers, and the folder in it.
const TRT_HEADERS_CRATE: &str = "trtx-sys-0.4.0";
const TRT_HEADERS_DIR: &str = "TensorRT-Headers/TRT-Enterprise-10.16";
const SHIM_DIR: &str = "src/backend/tensorrt/shim";

/// Compiles the TensorRT shim (src/backend/tensorrt/shim) against TensorRT 10 headers and sets
/// `cfg(tritonrs_trt_shim)`. The headers come from `TRITONRS_TENSORRT_INCLUDE` (a folder holding
/// NvInferRuntime.h, e.g. JetPack 6's /usr/include/aarch64-linux-gnu), else from the trtx-sys crate
/// in cargo's registry (see Cargo.toml; `cargo fetch` puts it there). Without headers the build goes
/// on without the shim, and TensorRT 10 plans are refused at run time saying so; with
/// `TRITONRS_REQUIRE_TRT_SHIM=1` (the test script sets it) that is an error instead.
fn tensorrt_shim() -> Result<(), Box<dyn Error>> {
    println!("cargo:rustc-check-cfg=cfg(tritonrs_trt_shim)");
    println!("cargo:rerun-if-changed={SHIM_DIR}");
    println!("cargo:rerun-if-env-changed=TRITONRS_TENSORRT_INCLUDE");
    let include = match env::var_os("TRITONRS_TENSORRT_INCLUDE") {
        Some(dir) => Some(PathBuf::from(dir)),
        None => registry_headers(),
    };
    let required = env::var_os("TRITONRS_REQUIRE_TRT_SHIM").is_some_and(|v| v == "1");
    let Some(include) = include.filter(|d| d.join("NvInferRuntime.h").is_file()) else {
        if required {
            return Err(format!(
                "TRITONRS_REQUIRE_TRT_SHIM=1 but no TensorRT 10 headers were found: run `cargo fetch` (it unpacks \
                 {TRT_HEADERS_CRATE}) or set TRITONRS_TENSORRT_INCLUDE"
            )
            .into());
        }
        println!(
            "cargo:warning=TensorRT shim not built: no TensorRT 10 headers (run `cargo fetch`, or set \
             TRITONRS_TENSORRT_INCLUDE); tensorrt_plan models on TensorRT 10 will be refused"
        );
        return Ok(());
    };
    println!("cargo:rerun-if-changed={}", include.display());
    let built = cc::Build::new()
        .cpp(true)
        // No C++ standard library: the shim defines the two runtime hooks it needs (see its source).
        .cpp_link_stdlib(None)
        .file(Path::new(SHIM_DIR).join("trt_shim.cpp"))
        // First, so the two-typedef cuda_runtime_api.h stand-in is the one TensorRT's headers include.
        .include(SHIM_DIR)
        .include(&include)
        .flag("-std=c++14")
        .flag("-fno-exceptions")
        .flag("-fno-rtti")
        .flag("-fvisibility=hidden")
        .flag_if_supported("-Wno-deprecated-declarations")
        .flag_if_supported("-Wno-unused-parameter")
        .try_compile("tritonrs_trt_shim");
    match built {
        Ok(()) => println!("cargo:rustc-cfg=tritonrs_trt_shim"),
        // No C++ compiler, most likely: the server still builds, and says so for TensorRT 10 plans.
        Err(e) if !required => println!("cargo:warning=TensorRT shim not built: {e}"),
        Err(e) => return Err(format!("TRITONRS_REQUIRE_TRT_SHIM=1 but the TensorRT shim did not compile: {e}").into()),
    }
    Ok(())
}

/// The TensorRT 10 headers in cargo's registry, where `cargo fetch` unpacked trtx-sys.
fn registry_headers() -> Option<PathBuf> {
    let home = env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))?;
    let src = home.join("registry").join("src");
    let mut found: Vec<PathBuf> = fs::read_dir(&src)
        .ok()?
        .filter_map(|e| e.ok())
        .map(|e| e.path().join(TRT_HEADERS_CRATE).join(TRT_HEADERS_DIR))
        .filter(|d| d.join("NvInferRuntime.h").is_file())
        .collect();
    found.sort();
    found.into_iter().next()
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
