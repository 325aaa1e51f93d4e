//! Triton's C APIs hosted by tritonrs, so that backends built for tritonserver (PyTorch, TensorFlow,
//! OpenVINO, custom C++ ones, or Triton's own builds of the built-in ones) run unchanged:
//! - `abi.rs`: the API's enum values and the objects behind its opaque pointers;
//! - `guard.rs`: what every exported function shares (errors, messages, the panic guard, checked
//!   pointers), below all of them;
//! - the functions this executable exports to them (`exports.list` tells the linker which):
//!   `exports.rs` (errors, messages, logging, backend, model and instance objects), `requests.rs`,
//!   `responses.rs` and `resources.rs` (the rest of TRITONBACKEND), `inprocess.rs`, `infer_requests.rs`,
//!   `infer_responses.rs` and `metrics.rs` (the TRITONSERVER calls back into the server),
//!   `agent_api.rs` (TRITONREPOAGENT), `cache_api.rs` (TRITONCACHE);
//! - `library.rs`: loading a `libtriton_<name>.so` and calling its entry points;
//! - `repoagent.rs`: repository agent libraries;
//! - `cache.rs`: response-cache libraries (`--cache-directory`);
//! - `host.rs`: the `model_api::Backend` that serves models through them.
//!
//! Imports go one way: `abi` <- `guard` <- the exported functions <- `library` <- `repoagent`, `cache`,
//! `host`.

mod abi;
mod agent_api;
mod cache;
mod cache_api;
mod exports;
mod guard;
mod host;
mod infer_requests;
mod infer_responses;
mod inprocess;
mod library;
mod metrics;
mod repoagent;
mod requests;
mod resources;
mod responses;

pub use cache::CCache;
pub use host::{CApiBackend, CCompleter, DEFAULT_BACKEND_DIRECTORY};
pub use repoagent::CAgent;

#[cfg(test)]
mod tests;
