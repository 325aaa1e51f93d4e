//! The core: the one transport-neutral API every front-end calls, and what it is built from.

pub mod cache;
pub mod classification;
pub mod heartbeat;
pub mod lifecycle;
pub mod rate_limiter;
pub mod repository;
pub mod scheduler;
pub mod server;
pub mod shm_params;
pub mod stats;
pub mod trace;
pub mod validate;
pub mod warmup;

pub use server::{ControlMode, MemorySources, Server, ServerOptions};
