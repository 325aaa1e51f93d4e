//! tritonrs: a lean, Triton-compatible inference server for edge devices.
//!
//! # The map
//! A request's path, each arrow one hop (imports point the same way, never back):
//! ```text
//! HTTP · gRPC · MQTT · Frigate ZMQ · DeepStack    frontend/   decode once (KServe JSON and binary: kserve/)
//!   └─ OpenAI's completions and chat on HTTP      openai/     a body into one request, responses into chunks
//!        │
//!        ▼
//! core::Server                                      core/server/     inference, control, metadata, streams
//!   ├─ repository, lifecycle (load steps)           core/repository/, core/lifecycle/
//!   ├─ schedulers (default, dynamic, sequence,      core/scheduler/  a queue per model, actor over pure state
//!   │   ensemble), response cache, rate limiter     core/cache/, core/rate_limiter/
//!   └─ statistics, trace                            core/stats.rs, core/trace/
//!        │  a Job per request, through a bounded queue
//!        ▼
//! backend instances on their own threads            backend/ (onnx, python, tensorrt, capi, agents)
//!        │  against the interface of                model_api/
//!        ▼
//! tensor memory: host, pinned, CUDA, shared memory  memory/, tensor/
//!        │
//!        ▼
//! the machine: CUDA, NVML, Jetson sysfs, systemd    platform/
//! ```
//! Beside the path: `config/` (flags and the config file), `assemble/` (flags into a server: backends,
//! agents, memory sources; `main.rs` and `tune` start here), `model_config/` (what `config.pbtxt` says),
//! `storage/` (S3, GCS, Azure into a local cache), `telemetry` (OpenTelemetry spans out over OTLP/HTTP), `vision/` (image pre- and post-processing for MQTT,
//! DeepStack and Frigate), `tune/` (`tritonrs tune`), `error` (the one error type), `proto` (generated).
//! Unit tests sit in one place: a sibling `tests.rs` in the folder of the module's name (`foo.rs` ->
//! `foo/tests.rs`, `foo/mod.rs` -> `foo/tests.rs`), declared by `#[cfg(test)] mod tests;` at its end.
#![deny(unsafe_code)]
// The `// SAFETY:` rule, checked by a tool: every unsafe block says why it is sound.
#![warn(clippy::undocumented_unsafe_blocks)]

pub mod assemble;
pub mod backend;
pub mod config;
pub mod core;
pub mod error;
pub mod frontend;
pub mod kserve;
pub mod logging;
pub mod memory;
pub mod metrics_text;
pub mod model_api;
pub mod model_config;
pub mod openai;
pub mod platform;
pub mod proto;
pub mod storage;
pub mod telemetry;
pub mod tensor;
pub mod tune;
pub mod vision;
