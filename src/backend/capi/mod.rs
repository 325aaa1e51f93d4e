//! Triton's C APIs hosted by tritonrs, so that backends built for tritonserver (PyTorch, TensorFlow,
//! OpenVINO, custom C++ ones, or Triton's own builds of the built-in ones) run unchanged:
//! - `abi.rs`: the API's enum values and the objects behind its opaque pointers;
//! - `exports.rs`: the TRITONSERVER_* and TRITONBACKEND_* functions this executable exports to them
//!   (`exports.list` tells the linker which);
//! - `library.rs`: loading a `libtriton_<name>.so` and calling its entry points;
//! - `host.rs`: the `model_api::Backend` that serves models through them.

mod abi;
mod exports;
mod host;
mod inprocess;
mod library;
mod repoagent;
mod resources;

pub use host::{CApiBackend, CCompleter, DEFAULT_BACKEND_DIRECTORY};
pub use repoagent::CAgent;

#[cfg(test)]
mod tests {
    /// `exports.list` (what the linker exports) names exactly the functions `exports.rs` defines.
    #[test]
    fn the_linker_exports_every_api_function_and_nothing_else() {
        let code = [
            include_str!("exports.rs"),
            include_str!("inprocess.rs"),
            include_str!("resources.rs"),
            include_str!("repoagent.rs"),
        ]
        .concat();
        let mut defined: Vec<&str> = code
            .split("#[no_mangle]")
            .skip(1)
            .filter_map(|s| s.split("fn ").nth(1))
            .filter_map(|s| s.split('(').next())
            .map(str::trim)
            .collect();
        let list = include_str!("exports.list");
        let body = list.split('{').nth(1).unwrap_or_default();
        let mut listed: Vec<&str> = body.split(';').map(str::trim).filter(|s| s.starts_with("TRITON")).collect();
        defined.sort_unstable();
        listed.sort_unstable();
        assert_eq!(defined, listed);
        assert!(defined.len() > 170);
    }
}
