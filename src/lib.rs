//! tritonrs: a lean, Triton-compatible inference server for edge devices.
//!
//! front-ends (`frontend`) → one core API (`core::Server`) → backend instances on their own threads
//! (`backend`) → tensor memory (`memory`).
#![deny(unsafe_code)]

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
pub mod platform;
pub mod proto;
pub mod storage;
pub mod tensor;
pub mod tune;
pub mod vision;
